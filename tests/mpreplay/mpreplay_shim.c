/*
 * LD_PRELOAD shim to replay recorded /proc snapshots through the real mpstat
 * binary deterministically (no root, no timing races, instant).
 *
 * Environment:
 *   REPLAY_DIR     directory holding stat.0, stat.1, ... (required)
 *                  optional: interrupts.K, softirqs.K, uptime.K
 *   REPLAY_SYSCPU  directory used instead of /sys/devices/system/cpu
 *   REPLAY_T0      fake epoch seconds of sample 0 (default 0)
 *   REPLAY_IV      seconds between samples for the fake clock (default 1)
 *   REPLAY_UNAME   if set, uname() returns Linux 1.2.3-TEST (SYSSTAT.TEST) x86_64
 *                  (same bogus identity as sysstat's own TEST build)
 * Sample index k = number of /proc/uptime opens so far - 1 (mpstat 12.x reads
 * /proc/uptime once per sample, right before /proc/stat). If no uptime.K file
 * exists a synthetic "1000+k*IV.00 0.00" uptime is served.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include <sys/utsname.h>

static int sample = -1;     /* incremented on every /proc/uptime open */
static int stat_opens = 0;

static long envl(const char *n, long d) { const char *v = getenv(n); return v ? atol(v) : d; }

static int cur_sample(void) { return sample >= 0 ? sample : 0; }

static const char *remap(const char *path, char *buf, size_t sz)
{
	const char *dir = getenv("REPLAY_DIR");
	const char *syscpu = getenv("REPLAY_SYSCPU");
	static const char pfx[] = "/sys/devices/system/cpu";
	if (syscpu && !strncmp(path, pfx, sizeof(pfx) - 1)) {
		snprintf(buf, sz, "%s%s", syscpu, path + sizeof(pfx) - 1);
		return buf;
	}
	if (!dir)
		return path;
	if (!strcmp(path, "/proc/stat")) {
		stat_opens++;
		snprintf(buf, sz, "%s/stat.%d", dir, cur_sample());
		return buf;
	}
	if (!strcmp(path, "/proc/interrupts") || !strcmp(path, "/proc/softirqs")) {
		snprintf(buf, sz, "%s/%s.%d", dir, path + 6, cur_sample());
		if (access(buf, R_OK) == 0)
			return buf;
		return path;
	}
	return path;
}

FILE *fopen(const char *path, const char *mode)
{
	static FILE *(*real)(const char *, const char *);
	char buf[4096];
	if (!real)
		real = dlsym(RTLD_NEXT, "fopen");
	if (getenv("REPLAY_DIR") && !strcmp(path, "/proc/uptime")) {
		sample++;
		snprintf(buf, sizeof(buf), "%s/uptime.%d", getenv("REPLAY_DIR"), sample);
		if (access(buf, R_OK) == 0)
			return real(buf, mode);
		char tmp[64];
		snprintf(tmp, sizeof(tmp), "%ld.00 0.00\n", 1000 + sample * envl("REPLAY_IV", 1));
		return fmemopen(strdup(tmp), strlen(tmp), "r");
	}
	return real(remap(path, buf, sizeof(buf)), mode);
}
FILE *fopen64(const char *path, const char *mode) { return fopen(path, mode); }

DIR *opendir(const char *path)
{
	static DIR *(*real)(const char *);
	char buf[4096];
	if (!real)
		real = dlsym(RTLD_NEXT, "opendir");
	return real(remap(path, buf, sizeof(buf)));
}

time_t time(time_t *t)
{
	/* mpstat calls time() just BEFORE reading /proc/uptime for a sample, so
	 * at that moment 'sample' still holds the previous sample's index. */
	time_t v = envl("REPLAY_T0", 0) + (time_t) (sample + 1) * envl("REPLAY_IV", 1);
	if (t)
		*t = v;
	return v;
}

unsigned int alarm(unsigned int s) { (void) s; return 0; }
#include <signal.h>
/* Next sample immediately. Like sysstat's TEST-mode next_time_step(): when no
 * further snapshot exists, simulate a Ctrl/C so mpstat prints its Average. */
int pause(void)
{
	char buf[4096];
	const char *dir = getenv("REPLAY_DIR");
	if (dir) {
		snprintf(buf, sizeof(buf), "%s/stat.%d", dir, cur_sample() + 1);
		if (access(buf, R_OK) != 0)
			raise(SIGINT);
	}
	return -1;
}

int uname(struct utsname *u)
{
	static int (*real)(struct utsname *);
	if (!real)
		real = dlsym(RTLD_NEXT, "uname");
	int rc = real(u);
	if (getenv("REPLAY_UNAME")) {
		strcpy(u->sysname, "Linux");
		strcpy(u->nodename, "SYSSTAT.TEST");
		strcpy(u->release, "1.2.3-TEST");
		strcpy(u->machine, "x86_64");
	}
	return rc;
}

#include <sys/stat.h>
int stat(const char *restrict path, struct stat *restrict st)
{
	static int (*real)(const char *restrict, struct stat *restrict);
	char buf[4096];
	if (!real)
		real = dlsym(RTLD_NEXT, "stat");
	return real(remap(path, buf, sizeof(buf)), st);
}
