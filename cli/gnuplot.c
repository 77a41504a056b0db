/* gnuplot.c: see gnuplot.h. */
#include "cli/gnuplot.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool gnuplot_find_scripts(char *buf, size_t n)
{
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    struct stat st;
    if (k > 0) {
        exe[k] = 0;
        snprintf(buf, n, "%s/plots", dirname(dirname(exe)));
        char probe[4300];
        snprintf(probe, sizeof probe, "%s/common.gp", buf);
        if (!stat(probe, &st)) return true;
    }
    snprintf(buf, n, "plots");
    return !stat("plots/common.gp", &st);
}

#define MAX_ARGS 64

int gnuplot_draw(const char *plots, const char *script, const char *dir, const char *name, const char *const *sets,
                 int nsets, const char *const *args, int nargs, terr *e)
{
    char gp[4200], prefix[4200];
    snprintf(gp, sizeof gp, "%s/%s", plots, script);
    snprintf(prefix, sizeof prefix, "%s/.%s.tmp", dir, name);
    if (2 * nsets + nargs + 5 > MAX_ARGS) return terr_set(e, "gnuplot %s: too many arguments", script);
    char *argv[MAX_ARGS];
    int k = 0;
    argv[k++] = "gnuplot";
    for (int i = 0; i < nsets; i++) {
        argv[k++] = "-e";
        argv[k++] = (char *)sets[i];
    }
    argv[k++] = "-c";
    argv[k++] = gp;
    bool placed = false;
    for (int i = 0; i < nargs; i++) placed |= !strcmp(args[i], GNUPLOT_OUT);
    if (!placed) argv[k++] = prefix;
    for (int i = 0; i < nargs; i++) argv[k++] = !strcmp(args[i], GNUPLOT_OUT) ? prefix : (char *)args[i];
    argv[k] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execvp("gnuplot", argv);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return terr_set(e, "cannot run gnuplot: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return terr_set(e, "gnuplot -c %s %s ... failed (exit status %d)", gp, prefix,
                        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    for (int i = 0; i < 2; i++) {
        const char *ext = i ? "svg" : "png";
        char from[4300], to[4300];
        snprintf(from, sizeof from, "%s.%s", prefix, ext);
        snprintf(to, sizeof to, "%s/%s.%s", dir, name, ext);
        if (rename(from, to)) return terr_set(e, "%s: cannot write: %s", to, strerror(errno));
    }
    return 0;
}
