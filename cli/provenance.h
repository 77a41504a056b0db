/*
 * provenance.h: what produced a result, so a number can be traced back and a stale one found.
 *
 * A result depends on the options (recorded in summary.json's `config`), on the tandem binary
 * (its version, and its build id: the linker's GNU build-id note, which changes whenever any code
 * changes, policies included) and on the files it read (trace, profile, model config), known by
 * the xxh3 hash of their contents. summary.json's `tandem` block records version, build id, date,
 * host and command line; a sweep point's identity hashes all of it but date and host.
 */
#ifndef TANDEM_PROVENANCE_H
#define TANDEM_PROVENANCE_H

#include <jansson.h>
#include <stdint.h>

#include "core/util.h"

/* Remembers the command line (main() calls it once; argv must outlive the process's use). */
void provenance_set_command(int argc, char **argv);
/* The binary's build id as hex: the GNU build-id note, or, for a binary linked without one, the
 * xxh3 of /proc/self/exe ("unknown" if neither can be read). Computed once. */
const char *provenance_build_id(void);
/* {"version", "build_id", "date" (UTC, "%Y%m%d-%H%M%S" as vLLM's result files), "host",
 * "command"}: a new object. */
json_t *provenance_json(void);
/* The xxh3-64 of a file's contents as 16 hex digits into hex; 0, or -1 with e naming the file. */
int provenance_hash_file(const char *path, char hex[17], terr *e);

#endif
