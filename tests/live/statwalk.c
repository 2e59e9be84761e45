/* A stats reader over many live memory cgroups, as a node agent's housekeeping reads them (cAdvisor in
 * kubelet reads every container cgroup's memory.stat): argv[1] lists memory.stat paths, one a line; each
 * is opened once and read again and again from offset 0 (pread regenerates a seq_file), so the CPU it
 * takes is the kernel formatting each memcg's statistics, in a loop until killed. Its comm is argv[2]. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: statwalk LIST COMM\n"); return 2; }
    prctl(PR_SET_NAME, argv[2], 0, 0, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 1; }
    char line[4096];
    int *fds = NULL, n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        int fd = open(line, O_RDONLY);
        if (fd < 0) { perror(line); return 1; }
        fds = realloc(fds, sizeof(int) * (n + 1));
        fds[n++] = fd;
    }
    fclose(f);
    printf("%d\n", n);
    fflush(stdout);
    static char buf[65536];
    for (;;)
        for (int i = 0; i < n; i++)
            if (pread(fds[i], buf, sizeof buf, 0) < 0) { perror("pread"); return 1; }
}
