/* zombie_tool: small static helper for tests/vm/matrix_probe.py (runs INSIDE the VM).
 *
 * Built on the host by matrix.py:  gcc -O2 -static -o zombie_tool zombie_tool.c
 *
 *   zombie_tool make PARENT FIRST N FILEDIR HOME [PAGES [socket]]
 *       for i in FIRST..FIRST+N-1: mkdir PARENT/zI, move this process into it (cgroup.procs),
 *       write PAGES (default 1; 0: none) pages of FILEDIR/fI (page cache charged to zI; the file is
 *       kept), move back to HOME (a cgroup.procs file), rmdir PARENT/zI.  A crash-looping unit's
 *       cgroup in miniature.  Prints {"made": N, "seconds": S, "failed": F}.
 *       "read": read PAGES pages of the existing FILEDIR/fI instead of writing it (clean page cache,
 *       as a container reading its image's files charges it).
 *       "socket": also open a socket while in zI and keep it (cgroup v2 sockets hold a reference on
 *       their memcg: sk_alloc -> mem_cgroup_sk_alloc), then stay alive (pause) until killed: a pin
 *       that no reparenting of page cache removes.
 *   zombie_tool read FILE N
 *       open/read-to-EOF/close FILE N times, as cAdvisor/kubelet read memory.stat; prints the
 *       kernel (ru_stime) and user CPU and wall per read, in microseconds, and the bytes per read.
 *   zombie_tool stream FILE SECONDS [CHUNK_KB]
 *       read FILE sequentially (wrapping at EOF) for SECONDS; prints MB read and kernel CPU per MB
 *       (the reclaim walk's cost when this process sits under a memory limit).
 *   zombie_tool spin SECONDS
 *       busy loop in user space (a hot core that is not the kernel's).
 *   zombie_tool readloop FILE SECONDS
 *       read FILE (e.g. memory.stat) again and again for SECONDS: a stats reader as a hot core.
 *   zombie_tool udpsend DST_IP PORT SECONDS PPS SIZE
 *       UDP datagrams of SIZE bytes to DST_IP:PORT at PPS for SECONDS; prints sent / errors (ENOBUFS).
 *   zombie_tool icmpping DST_IP COUNT INTERVAL_MS
 *       ICMP echo (raw socket) COUNT times; prints RTT min/avg/p50/p99/max in microseconds and losses:
 *       the reply is made in the target's NET_RX softirq, so the RTT shows how long NAPI waited.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double tv(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

static int write_str(const char *path, const char *s) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    ssize_t n = write(fd, s, strlen(s));
    int e = errno;
    close(fd);
    errno = e;
    return n < 0 ? -1 : 0;
}

static int cmd_make(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "make PARENT FIRST N FILEDIR HOME [PAGES]\n"); return 2; }
    const char *parent = argv[2], *filedir = argv[5], *home = argv[6];
    long first = atol(argv[3]), n = atol(argv[4]), pages = argc > 7 ? atol(argv[7]) : 1;
    int sockets = argc > 8 && !strcmp(argv[8], "socket");
    int reading = argc > 8 && !strcmp(argv[8], "read");
    if (sockets) {
        struct rlimit rl = {n + 64, n + 64};
        if (setrlimit(RLIMIT_NOFILE, &rl)) perror("setrlimit");
    }
    char pid[32], path[4096], procs[4096];
    static char page[4096];
    memset(page, 'z', sizeof page);
    snprintf(pid, sizeof pid, "%d\n", getpid());
    long failed = 0;
    double t0 = now();
    for (long i = first; i < first + n; i++) {
        snprintf(path, sizeof path, "%s/z%ld", parent, i);
        if (mkdir(path, 0755) && errno != EEXIST) { perror(path); failed++; continue; }
        snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
        if (write_str(procs, pid)) { perror(procs); failed++; rmdir(path); continue; }
        if (sockets && socket(AF_UNIX, SOCK_DGRAM, 0) < 0) { perror("socket"); failed++; }
        snprintf(procs, sizeof procs, "%s/f%ld", filedir, i);
        int fd = pages <= 0 ? -2 : reading ? open(procs, O_RDONLY) : open(procs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd == -2) ;
        else if (fd < 0) { perror(procs); failed++; }
        else if (reading) {
            for (long p = 0; p < pages; p++)
                if (read(fd, page, sizeof page) <= 0) break;
            close(fd);
        } else {
            for (long p = 0; p < pages; p++)
                if (write(fd, page, sizeof page) != sizeof page) { perror("write"); failed++; break; }
            close(fd);
        }
        if (write_str(home, pid)) { perror(home); return 1; }
        if (rmdir(path)) { perror(path); failed++; }
    }
    printf("{\"made\": %ld, \"seconds\": %.3f, \"failed\": %ld}\n", n, now() - t0, failed);
    fflush(stdout);
    if (sockets) for (;;) pause();
    return 0;
}

static char buf[1 << 20];

static int cmd_read(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "read FILE N\n"); return 2; }
    const char *file = argv[2];
    long n = atol(argv[3]), bytes = 0;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int fd = open(file, O_RDONLY);
        if (fd < 0) { perror(file); return 1; }
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0) bytes += k;
        close(fd);
    }
    double wall = now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double sys = tv(r1.ru_stime) - tv(r0.ru_stime), usr = tv(r1.ru_utime) - tv(r0.ru_utime);
    printf("{\"file\": \"%s\", \"reads\": %ld, \"sys_us\": %.2f, \"user_us\": %.2f, \"wall_us\": %.2f, "
           "\"bytes\": %ld}\n", file, n, 1e6 * sys / n, 1e6 * usr / n, 1e6 * wall / n, n ? bytes / n : 0);
    return 0;
}

static int cmd_stream(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "stream FILE SECONDS [CHUNK_KB]\n"); return 2; }
    const char *file = argv[2];
    double secs = atof(argv[3]);
    long chunk = argc > 4 ? atol(argv[4]) * 1024 : sizeof buf;
    if (chunk > (long)sizeof buf) chunk = sizeof buf;
    int fd = open(file, O_RDONLY);
    if (fd < 0) { perror(file); return 1; }
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    long long bytes = 0;
    while (now() - t0 < secs) {
        ssize_t k = read(fd, buf, chunk);
        if (k < 0) { perror("read"); return 1; }
        if (k == 0) { lseek(fd, 0, SEEK_SET); continue; }
        bytes += k;
    }
    double wall = now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double sys = tv(r1.ru_stime) - tv(r0.ru_stime), usr = tv(r1.ru_utime) - tv(r0.ru_utime);
    double mb = bytes / 1048576.0;
    printf("{\"file\": \"%s\", \"seconds\": %.3f, \"mb\": %.1f, \"sys_s\": %.3f, \"user_s\": %.3f, "
           "\"sys_ms_per_mb\": %.3f}\n", file, wall, mb, sys, usr, mb > 0 ? 1e3 * sys / mb : 0.0);
    return 0;
}

static int cmd_spin(int argc, char **argv) {
    double secs = argc > 2 ? atof(argv[2]) : 1, t0 = now();
    volatile unsigned long x = 0;
    while (now() - t0 < secs) for (int i = 0; i < 100000; i++) x++;
    return 0;
}

static int cmd_readloop(int argc, char **argv) {
    if (argc < 4) return 2;
    double secs = atof(argv[3]), t0 = now();
    long n = 0;
    while (now() - t0 < secs) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) { perror(argv[2]); return 1; }
        while (read(fd, buf, sizeof buf) > 0) ;
        close(fd);
        n++;
    }
    printf("{\"reads\": %ld, \"seconds\": %.3f}\n", n, now() - t0);
    return 0;
}

static int cmd_udpsend(int argc, char **argv) {
    if (argc < 7) return 2;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    double secs = atof(argv[4]), pps = atof(argv[5]), t0 = now();
    int size = atoi(argv[6]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    long sent = 0, err = 0, enobufs = 0;
    while (1) {
        double t = now() - t0;
        if (t >= secs) break;
        double due = sent + err;
        if (pps > 0 && due > t * pps) { usleep(200); continue; }
        if (sendto(fd, buf, size, 0, (struct sockaddr *)&a, sizeof a) < 0) {
            err++;
            if (errno == ENOBUFS || errno == EAGAIN) enobufs++;
        } else sent++;
    }
    printf("{\"sent\": %ld, \"errors\": %ld, \"enobufs\": %ld, \"seconds\": %.3f}\n", sent, err, enobufs, now() - t0);
    return 0;
}

static unsigned short csum(void *p, int len) {
    unsigned long s = 0;
    unsigned short *w = p;
    for (; len > 1; len -= 2) s += *w++;
    if (len) s += *(unsigned char *)w;
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return ~s;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_icmpping(int argc, char **argv) {
    if (argc < 5) return 2;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    int count = atoi(argv[3]);
    double interval = atof(argv[4]) / 1000.0;
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    if (fd < 0) { perror("socket"); return 1; }
    double *rtt = calloc(count, sizeof(double));
    double *sent_at = calloc(count, sizeof(double));
    int got = 0, id = getpid() & 0xffff;
    double t0 = now();
    for (int i = 0; i < count; i++) {
        struct icmphdr h = {.type = ICMP_ECHO};
        h.un.echo.id = htons(id);
        h.un.echo.sequence = htons(i);
        h.checksum = csum(&h, sizeof h);
        sent_at[i] = now();
        sendto(fd, &h, sizeof h, 0, (struct sockaddr *)&a, sizeof a);
        double until = t0 + (i + 1) * interval;
        for (;;) {
            double left = until - now();
            if (left <= 0) break;
            struct pollfd pf = {fd, POLLIN, 0};
            if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
            char pkt[1500];
            ssize_t k = recv(fd, pkt, sizeof pkt, 0);
            if (k < (ssize_t)(sizeof(struct iphdr) + sizeof(struct icmphdr))) continue;
            struct iphdr *ip = (struct iphdr *)pkt;
            struct icmphdr *r = (struct icmphdr *)(pkt + ip->ihl * 4);
            if (r->type != ICMP_ECHOREPLY || ntohs(r->un.echo.id) != id) continue;
            int seq = ntohs(r->un.echo.sequence);
            if (seq < count && rtt[seq] == 0) { rtt[seq] = now() - sent_at[seq]; got++; }
        }
    }
    /* late replies */
    double until = now() + 2;
    while (now() < until && got < count) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        char pkt[1500];
        ssize_t k = recv(fd, pkt, sizeof pkt, 0);
        if (k < (ssize_t)(sizeof(struct iphdr) + sizeof(struct icmphdr))) continue;
        struct iphdr *ip = (struct iphdr *)pkt;
        struct icmphdr *r = (struct icmphdr *)(pkt + ip->ihl * 4);
        if (r->type != ICMP_ECHOREPLY || ntohs(r->un.echo.id) != id) continue;
        int seq = ntohs(r->un.echo.sequence);
        if (seq < count && rtt[seq] == 0) { rtt[seq] = now() - sent_at[seq]; got++; }
    }
    double *v = calloc(got + 1, sizeof(double));
    int j = 0;
    double sum = 0;
    for (int i = 0; i < count; i++) if (rtt[i] > 0) { v[j++] = rtt[i] * 1e6; sum += rtt[i] * 1e6; }
    qsort(v, j, sizeof(double), cmpd);
    printf("{\"sent\": %d, \"received\": %d, \"min_us\": %.0f, \"avg_us\": %.0f, \"p50_us\": %.0f, "
           "\"p99_us\": %.0f, \"max_us\": %.0f}\n", count, got, j ? v[0] : 0, j ? sum / j : 0,
           j ? v[j / 2] : 0, j ? v[(int)(j * 0.99)] : 0, j ? v[j - 1] : 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: zombie_tool make|read|stream|spin ...\n"); return 2; }
    if (!strcmp(argv[1], "make")) return cmd_make(argc, argv);
    if (!strcmp(argv[1], "read")) return cmd_read(argc, argv);
    if (!strcmp(argv[1], "stream")) return cmd_stream(argc, argv);
    if (!strcmp(argv[1], "spin")) return cmd_spin(argc, argv);
    if (!strcmp(argv[1], "readloop")) return cmd_readloop(argc, argv);
    if (!strcmp(argv[1], "udpsend")) return cmd_udpsend(argc, argv);
    if (!strcmp(argv[1], "icmpping")) return cmd_icmpping(argc, argv);
    fprintf(stderr, "unknown command %s\n", argv[1]);
    return 2;
}
