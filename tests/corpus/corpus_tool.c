/* corpus_tool: the workloads of the explain corpus (tests/corpus/cases), run INSIDE the VM.
 *
 * Built on the host by tests/corpus/make.py:  gcc -O2 -static -pthread -o corpus_tool corpus_tool.c
 *
 *   corpus_tool COMM MODE ARGS...
 *
 * COMM is the process name (prctl PR_SET_NAME: what /proc, perf and explain show). CPU -1: not pinned.
 * Every mode runs for SECONDS and exits; none outlives its parent (PR_SET_PDEATHSIG).
 *
 *   spin SECONDS CPU                      busy loop in user space
 *   duty SECONDS CPU PCT PERIOD_MS        busy PCT% of every period, asleep the rest
 *   bursts SECONDS CPU ON_MS OFF_MS       busy ON_MS, asleep OFF_MS, again
 *   roam SECONDS STEP_MS NCPUS            busy loop that moves to the next CPU every STEP_MS
 *   readzero SECONDS CPU BYTES            read(/dev/zero, BYTES) again and again: time in the kernel
 *   getppid SECONDS CPU                   the getppid syscall again and again
 *   rtspin SECONDS CPU PRIO               SCHED_FIFO PRIO busy loop in user space
 *   udpflood SECONDS CPU DST PORT SIZE    UDP datagrams to DST:PORT as fast as the socket takes them
 *   udpsink SECONDS CPU PORT              receive and drop UDP datagrams on PORT
 *   lockfile SECONDS CPU NTHREADS HOLDCPU FILE
 *                                         NTHREADS threads on CPU append 1 byte to FILE (O_APPEND: the inode's
 *                                         lock), one thread on HOLDCPU appends 256 KiB at a time (holds it long)
 *   lockmm SECONDS CPU NTHREADS HOLDCPU   NTHREADS threads on CPU fault a page in and drop it (mmap_lock for
 *                                         read), one thread on HOLDCPU maps, fills and unmaps 8 MiB (for write)
 *   lockfile2 SECONDS CPU NTHREADS HOLDCPU FILE [PAUSE_US]
 *                                         as lockfile, each thread with its own open file (only the inode's lock
 *                                         is shared, not the file position's); the holder pauses PAUSE_US
 *                                         after each of its writes
 *   lockpipe SECONDS CPU NTHREADS HOLDCPU READCPU
 *                                         NTHREADS threads on CPU write 1 byte to one pipe, one on HOLDCPU writes
 *                                         4 KiB at a time, a reader on READCPU drains it (the pipe's mutex)
 *   lockmprotect SECONDS CPU NTHREADS HOLDCPU
 *                                         NTHREADS threads on CPU mprotect an untouched page (mmap_lock for
 *                                         write), one on HOLDCPU maps, fills and unmaps 8 MiB
 *   memhog SECONDS CPU MB                 touch MB of anonymous memory again and again
 *   stream SECONDS CPU FILE CHUNK_KB      read FILE sequentially, wrapping at its end (page cache)
 *   threads SECONDS CPU SPIN_MS           start a thread that spins SPIN_MS and exits, join it, again (many
 *                                         short-lived threads of one process: a thread-per-request server)
 *   shim SECONDS CPU CONCURRENT PROCS PROG ARGS...
 *                                         a container runtime's shim running exec probes: keeps CONCURRENT
 *                                         children alive; each writes its pid to every file of PROCS (comma-
 *                                         separated cgroup.procs: the container's cgroups) and execs PROG ARGS
 *                                         (runc exec's path, shortened); reaped as they exit
 *   tcpdrip SECONDS CPU DST PORT SIZE     connect, TCP_NODELAY, write SIZE bytes at a time as fast as the
 *                                         socket takes them (many small segments)
 *   tcpslow SECONDS CPU PORT RCVBUF READ_US READ_BYTES
 *                                         accept one connection with SO_RCVBUF RCVBUF, read READ_BYTES every
 *                                         READ_US (a slow reader: the queue of small segments fills, and
 *                                         the kernel prunes and collapses it in the receive softirq)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) perror("sched_setaffinity");
}

static volatile unsigned long sink;

static void busy_until(double t) {
    while (now() < t)
        for (int i = 0; i < 20000; i++) sink++;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static double END;

static int spin(int argc, char **argv) {
    pin(atoi(argv[4]));
    busy_until(END);
    return 0;
}

static int duty(int argc, char **argv) {
    pin(atoi(argv[4]));
    double pct = atof(argv[5]) / 100, per = atof(argv[6]) / 1000;
    while (now() < END) {
        double t = now();
        busy_until(t + pct * per);
        sleep_s(per * (1 - pct));
    }
    return 0;
}

static int bursts(int argc, char **argv) {
    pin(atoi(argv[4]));
    double on = atof(argv[5]) / 1000, off = atof(argv[6]) / 1000;
    while (now() < END) {
        busy_until(now() + on);
        sleep_s(off);
    }
    return 0;
}

static int roam(int argc, char **argv) {
    double step = atof(argv[4]) / 1000;
    int n = atoi(argv[5]), c = 0;
    while (now() < END) {
        pin(c);
        busy_until(now() + step);
        c = (c + 1) % n;
    }
    return 0;
}

static char buf[1 << 20];

static int readzero(int argc, char **argv) {
    pin(atoi(argv[4]));
    long n = atol(argv[5]);
    if (n > (long)sizeof buf) n = sizeof buf;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0) { perror("/dev/zero"); return 1; }
    while (now() < END)
        for (int i = 0; i < 64; i++)
            if (read(fd, buf, n) < 0) { perror("read"); return 1; }
    return 0;
}

static int getppid_loop(int argc, char **argv) {
    pin(atoi(argv[4]));
    while (now() < END)
        for (int i = 0; i < 1000; i++) sink += syscall(SYS_getppid);
    return 0;
}

static int rtspin(int argc, char **argv) {
    pin(atoi(argv[4]));
    struct sched_param p = {.sched_priority = atoi(argv[5])};
    if (sched_setscheduler(0, SCHED_FIFO, &p)) { perror("sched_setscheduler"); return 1; }
    busy_until(END);
    return 0;
}

static int udpflood(int argc, char **argv) {
    pin(atoi(argv[4]));
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[6]))};
    inet_pton(AF_INET, argv[5], &a.sin_addr);
    int size = atoi(argv[7]);
    long sent = 0, errs = 0;
    while (now() < END)
        for (int i = 0; i < 64; i++)
            if (sendto(s, buf, size, 0, (struct sockaddr *)&a, sizeof a) < 0) errs++; else sent++;
    printf("{\"sent\": %ld, \"errors\": %ld}\n", sent, errs);
    return 0;
}

static int udpsink(int argc, char **argv) {
    pin(atoi(argv[4]));
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[5])), .sin_addr.s_addr = INADDR_ANY};
    if (bind(s, (struct sockaddr *)&a, sizeof a)) { perror("bind"); return 1; }
    struct timeval tv = {0, 200000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    long got = 0;
    while (now() < END)
        if (recv(s, buf, sizeof buf, 0) > 0) got++;
    printf("{\"received\": %ld}\n", got);
    return 0;
}

struct lockarg { int cpu; int fd; long chunk; };

static void *appender(void *p) {
    struct lockarg *a = p;
    pin(a->cpu);
    while (now() < END)
        for (int i = 0; i < 16; i++)
            if (write(a->fd, buf, a->chunk) < 0) { perror("write"); return NULL; }
    return NULL;
}

static int lockfile(int argc, char **argv) {
    int cpu = atoi(argv[4]), n = atoi(argv[5]), hold = atoi(argv[6]);
    int fd = open(argv[7], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) { perror(argv[7]); return 1; }
    pthread_t th[65];
    struct lockarg a[65];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        a[i] = (struct lockarg){cpu, fd, 1};
        pthread_create(&th[i], NULL, appender, &a[i]);
    }
    a[n] = (struct lockarg){hold, fd, 256 << 10};
    pthread_create(&th[n], NULL, appender, &a[n]);
    while (now() < END) {  /* keep the file small: truncating takes the same lock */
        sleep_s(0.5);
        if (ftruncate(fd, 0)) perror("ftruncate");
    }
    for (int i = 0; i <= n; i++) pthread_join(th[i], NULL);
    return 0;
}

struct lockarg2 { int cpu; const char *path; long chunk; int pause_us; };

static void *own_appender(void *p) {  /* an open file description of its own: only the inode's lock is shared */
    struct lockarg2 *a = p;
    pin(a->cpu);
    if (a->chunk > 1) prctl(PR_SET_NAME, "lock-holder");
    int fd = open(a->path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) { perror(a->path); return NULL; }
    while (now() < END) {
        for (int i = 0; i < (a->pause_us ? 1 : 16); i++)
            if (write(fd, buf, a->chunk) < 0) { perror("write"); return NULL; }
        if (a->pause_us) sleep_s(a->pause_us / 1e6);
    }
    return NULL;
}

static int lockfile2(int argc, char **argv) {
    int cpu = atoi(argv[4]), n = atoi(argv[5]), hold = atoi(argv[6]);
    pthread_t th[65];
    struct lockarg2 a[65];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        a[i] = (struct lockarg2){cpu, argv[7], 1, 0};
        pthread_create(&th[i], NULL, own_appender, &a[i]);
    }
    a[n] = (struct lockarg2){hold, argv[7], 256 << 10, argc > 8 ? atoi(argv[8]) : 0};
    pthread_create(&th[n], NULL, own_appender, &a[n]);
    int fd = open(argv[7], O_WRONLY | O_CREAT, 0644);
    while (now() < END) {
        sleep_s(0.5);
        if (ftruncate(fd, 0)) perror("ftruncate");
    }
    for (int i = 0; i <= n; i++) pthread_join(th[i], NULL);
    return 0;
}

static int pipefd[2];

static void *pipe_writer(void *p) {
    struct lockarg *a = p;
    pin(a->cpu);
    while (now() < END)
        for (int i = 0; i < 16; i++)
            if (write(pipefd[1], buf, a->chunk) < 0) { perror("write"); return NULL; }
    return NULL;
}

static void *pipe_reader(void *p) {
    struct lockarg *a = p;
    pin(a->cpu);
    while (now() < END)
        if (read(pipefd[0], buf + 4096, 65536) < 0) { perror("read"); return NULL; }
    return NULL;
}

static int lockpipe(int argc, char **argv) {
    int cpu = atoi(argv[4]), n = atoi(argv[5]), hold = atoi(argv[6]), rcpu = atoi(argv[7]);
    if (pipe(pipefd)) { perror("pipe"); return 1; }
    fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20);
    pthread_t th[66];
    struct lockarg a[66];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        a[i] = (struct lockarg){cpu, -1, 1};
        pthread_create(&th[i], NULL, pipe_writer, &a[i]);
    }
    a[n] = (struct lockarg){hold, -1, 4096};
    pthread_create(&th[n], NULL, pipe_writer, &a[n]);
    a[n + 1] = (struct lockarg){rcpu, -1, 0};
    pthread_create(&th[n + 1], NULL, pipe_reader, &a[n + 1]);
    sleep_s(END - now() + 0.5);
    _exit(0);
}

static void *protector(void *p) {  /* mmap_lock for write, on a page never touched (no TLB flush) */
    struct lockarg *a = p;
    pin(a->cpu);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    while (now() < END)
        for (int i = 0; i < 16; i++)
            mprotect(m, 4096, (i & 1) ? PROT_READ | PROT_WRITE : PROT_READ);
    return NULL;
}

static void *mapper(void *p);

static int lockmprotect(int argc, char **argv) {
    int cpu = atoi(argv[4]), n = atoi(argv[5]), hold = atoi(argv[6]);
    pthread_t th[65];
    struct lockarg a[65];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        a[i] = (struct lockarg){cpu, -1, 0};
        pthread_create(&th[i], NULL, protector, &a[i]);
    }
    a[n] = (struct lockarg){hold, -1, 0};
    pthread_create(&th[n], NULL, mapper, &a[n]);
    for (int i = 0; i <= n; i++) pthread_join(th[i], NULL);
    return 0;
}

static void *faulter(void *p) {
    struct lockarg *a = p;
    pin(a->cpu);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    while (now() < END) {
        m[0] = 1;
        madvise(m, 4096, MADV_DONTNEED);
    }
    return NULL;
}

static void *mapper(void *p) {
    struct lockarg *a = p;
    pin(a->cpu);
    size_t len = 8 << 20;
    while (now() < END) {
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) { perror("mmap"); return NULL; }
        munmap(m, len);
    }
    return NULL;
}

static int lockmm(int argc, char **argv) {
    int cpu = atoi(argv[4]), n = atoi(argv[5]), hold = atoi(argv[6]);
    pthread_t th[65];
    struct lockarg a[65];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        a[i] = (struct lockarg){cpu, -1, 0};
        pthread_create(&th[i], NULL, faulter, &a[i]);
    }
    a[n] = (struct lockarg){hold, -1, 0};
    pthread_create(&th[n], NULL, mapper, &a[n]);
    for (int i = 0; i <= n; i++) pthread_join(th[i], NULL);
    return 0;
}

static int memhog(int argc, char **argv) {
    pin(atoi(argv[4]));
    size_t len = (size_t)atol(argv[5]) << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    while (now() < END)
        for (size_t o = 0; o < len && now() < END; o += 4096) m[o]++;
    return 0;
}

static int stream(int argc, char **argv) {
    pin(atoi(argv[4]));
    long chunk = atol(argv[6]) << 10;
    if (chunk > (long)sizeof buf) chunk = sizeof buf;
    int fd = open(argv[5], O_RDONLY);
    if (fd < 0) { perror(argv[5]); return 1; }
    long mb = 0, got = 0;
    while (now() < END) {
        ssize_t r = read(fd, buf, chunk);
        if (r < 0) { perror("read"); return 1; }
        if (r == 0) { lseek(fd, 0, SEEK_SET); continue; }
        got += r;
    }
    mb = got >> 20;
    printf("{\"mb\": %ld}\n", mb);
    return 0;
}

static double SPIN;

static void *spinner(void *p) {
    busy_until(now() + SPIN);
    return p;
}

static int threads(int argc, char **argv) {
    pin(atoi(argv[4]));
    SPIN = atof(argv[5]) / 1000;
    long n = 0;
    while (now() < END) {
        pthread_t t;
        if (pthread_create(&t, NULL, spinner, NULL)) { perror("pthread_create"); return 1; }
        pthread_join(t, NULL);
        n++;
    }
    printf("{\"threads\": %ld}\n", n);
    return 0;
}

static int tcpdrip(int argc, char **argv) {
    pin(atoi(argv[4]));
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[6]))};
    inet_pton(AF_INET, argv[5], &a.sin_addr);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int i = 0; connect(s, (struct sockaddr *)&a, sizeof a); i++) {
        if (i > 50) { perror("connect"); return 1; }
        sleep_s(0.1);
    }
    int flags = fcntl(s, F_GETFL);
    fcntl(s, F_SETFL, flags | O_NONBLOCK);
    int size = atoi(argv[7]);
    long sent = 0;
    while (now() < END) {
        ssize_t r = send(s, buf, size, 0);
        if (r > 0) sent += r;
        else sleep_s(0.0002);
    }
    printf("{\"sent\": %ld}\n", sent);
    return 0;
}

static int tcpslow(int argc, char **argv) {
    pin(atoi(argv[4]));
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, rcv = atoi(argv[6]);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);  /* inherited by the accepted socket */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[5])), .sin_addr.s_addr = INADDR_ANY};
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) { perror("bind/listen"); return 1; }
    int s = accept(l, NULL, NULL);
    if (s < 0) { perror("accept"); return 1; }
    double every = atof(argv[7]) / 1e6;
    long got = 0, want = atol(argv[8]);
    if (want <= 0 || want > (long)sizeof buf) want = sizeof buf;
    while (now() < END) {
        ssize_t r = recv(s, buf, want, MSG_DONTWAIT);
        if (r > 0) got += r;
        sleep_s(every);
    }
    printf("{\"received\": %ld}\n", got);
    return 0;
}

static int shim(int argc, char **argv) {
    pin(atoi(argv[4]));
    int concurrent = atoi(argv[5]), running = 0;
    char *procs = argv[6];
    long started = 0;
    while (now() < END || running > 0) {
        while (running < concurrent && now() < END) {
            pid_t pid = fork();
            if (pid == 0) {
                char me[32], *save = NULL, *list = strdup(procs);
                snprintf(me, sizeof me, "%d", getpid());
                for (char *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
                    int fd = open(f, O_WRONLY);
                    if (fd < 0 || write(fd, me, strlen(me)) < 0) { perror(f); _exit(1); }
                    close(fd);
                }
                execv(argv[7], argv + 7);
                perror("execv");
                _exit(127);
            }
            if (pid > 0) { running++; started++; }
        }
        if (wait(NULL) > 0) running--;
        else if (errno == ECHILD) running = 0;
    }
    printf("{\"started\": %ld}\n", started);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: corpus_tool COMM MODE SECONDS ARGS...\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, argv[1]);
    memset(buf, 'c', sizeof buf);
    END = now() + atof(argv[3]);
    const char *m = argv[2];
    struct { const char *name; int (*fn)(int, char **); int args; } modes[] = {
        {"spin", spin, 5}, {"duty", duty, 7}, {"bursts", bursts, 7}, {"roam", roam, 6},
        {"readzero", readzero, 6}, {"getppid", getppid_loop, 5}, {"rtspin", rtspin, 6},
        {"udpflood", udpflood, 8}, {"udpsink", udpsink, 6}, {"lockfile", lockfile, 8},
        {"lockmm", lockmm, 7}, {"lockfile2", lockfile2, 8}, {"lockpipe", lockpipe, 8},
        {"lockmprotect", lockmprotect, 7}, {"memhog", memhog, 6}, {"stream", stream, 7},
        {"threads", threads, 6}, {"shim", shim, 9}, {"tcpdrip", tcpdrip, 8}, {"tcpslow", tcpslow, 9},
    };
    for (unsigned i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(m, modes[i].name)) {
            if (argc < modes[i].args) { fprintf(stderr, "%s: too few arguments\n", m); return 2; }
            return modes[i].fn(argc, argv);
        }
    fprintf(stderr, "unknown mode %s\n", m);
    return 2;
}
