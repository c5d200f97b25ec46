/* lmbench bw_unix's loop: a writer pinned to CPU 0 writes 64 KiB at a time into an
 * AF_UNIX stream socket, a reader pinned to CPU 1 reads it, both from static buffers, so
 * that once running neither faults or frees a page of its own (af_unix.py, in Python,
 * does both). What the kernel then allocates and frees per write is the socket's.
 *
 * Usage: bw_unix SECONDS [unpinned]
 * With "unpinned" neither task is pinned, as lmbench's are not, so the scheduler's
 * migrations can be recorded (docs/EXPERIMENTS.md, "lmbench's pairs swapping roles").
 * Build and record (root; docs/EXPERIMENTS.md, "A socket's L2s beside its L3"):
 *   cc -O2 -o /tmp/bw_unix crates/trace/workloads/bw_unix.c
 *   mmkit trace record --seconds 1.5 --warmup 0.5 --buffer-kb 131072 --out F -- /tmp/bw_unix 3
 *   mmkit trace refills F
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XFER (64 * 1024)
static char buf[XFER];

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	int pinned = !(argc > 2 && strcmp(argv[2], "unpinned") == 0);
	int fds[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
		perror("socketpair");
		return 1;
	}
	memset(buf, 'x', sizeof(buf));
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		if (pinned)
			pin(1);
		for (;;) {
			ssize_t n = read(fds[1], buf, XFER);
			if (n <= 0)
				_exit(0);
		}
	}
	close(fds[1]);
	if (pinned)
		pin(0);
	fprintf(stderr, "bw_unix: writer %d, reader %d\n", (int)getpid(), (int)pid);
	double end = now() + seconds;
	unsigned long sent = 0;
	while (now() < end) {
		size_t off = 0;
		while (off < XFER) {
			ssize_t n = write(fds[0], buf + off, XFER - off);
			if (n <= 0) {
				perror("write");
				return 1;
			}
			off += n;
		}
		sent++;
	}
	close(fds[0]);
	waitpid(pid, NULL, 0);
	fprintf(stderr, "bw_unix: %lu messages of 64 KiB in %.1f s\n", sent, seconds);
	return 0;
}
