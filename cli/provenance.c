/* provenance.c: see provenance.h. */
#include "cli/provenance.h"

#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli/version.h"

static int saved_argc;
static char **saved_argv;

void provenance_set_command(int argc, char **argv)
{
    saved_argc = argc;
    saved_argv = argv;
}

/* dl_iterate_phdr visits the main program first: look for its NT_GNU_BUILD_ID note. */
static int find_note(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    char *hex = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const unsigned char *name = p + sizeof *nh, *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) && nh->n_descsz <= 32) {
                for (unsigned k = 0; k < nh->n_descsz; k++) sprintf(hex + 2 * k, "%02x", desc[k]);
                return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1; /* only the main program */
}

const char *provenance_build_id(void)
{
    static char id[65];
    if (id[0]) return id;
    dl_iterate_phdr(find_note, id);
    if (!id[0]) {
        terr e;
        char hex[17];
        snprintf(id, sizeof id, "%s", provenance_hash_file("/proc/self/exe", hex, &e) ? "unknown" : hex);
    }
    return id;
}

int provenance_hash_file(const char *path, char hex[17], terr *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) return terr_set(e, "%s: cannot read: %s", path, strerror(errno));
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) XXH3_64bits_update(st, buf, n);
    int bad = ferror(f);
    fclose(f);
    snprintf(hex, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    XXH3_freeState(st);
    if (bad) return terr_set(e, "%s: read error", path);
    return 0;
}

json_t *provenance_json(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "version", json_string(tandem_version));
    json_object_set_new(o, "build_id", json_string(provenance_build_id()));
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", gmtime_r(&now, &tm));
    json_object_set_new(o, "date", json_string(date));
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    json_object_set_new(o, "host", json_string(host));
    json_t *cmd = json_array();
    for (int i = 0; i < saved_argc; i++) json_array_append_new(cmd, json_string(saved_argv[i]));
    json_object_set_new(o, "command", cmd);
    return o;
}
