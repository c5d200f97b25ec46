/* lmbench bw_unix's loop: a writer pinned to CPU 0 writes 64 KiB at a time into an
 * AF_UNIX stream socket, a reader pinned to CPU 1 reads it, both from static buffers, so
 * that once running neither faults or frees a page of its own (af_unix.py, in Python,
 * does both). What the kernel then allocates and frees per write is the socket's.
 *
 * Usage: bw_unix SECONDS [unpinned] [tcp]
 * With "unpinned" neither task is pinned, as lmbench's are not, so the scheduler's
 * migrations can be recorded (docs/EXPERIMENTS.md, "lmbench's pairs swapping roles").
 * With "tcp" the stream is a loopback TCP connection carrying 10 KiB writes, netperf's
 * message size, as a stand-in for netperf's SCTP where the kernel has no SCTP.
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
#include <arpa/inet.h>
#include <netinet/in.h>
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

/* A connected loopback TCP pair in fds[0] (the writer's end) and fds[1]. */
static int tcp_pair(int fds[2])
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) ||
	    listen(listener, 1) || getsockname(listener, (struct sockaddr *)&addr, &len))
		return -1;
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&addr, sizeof(addr)))
		return -1;
	fds[1] = accept(listener, NULL, NULL);
	close(listener);
	return fds[1] < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	int pinned = 1, tcp = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "unpinned") == 0)
			pinned = 0;
		else if (strcmp(argv[i], "tcp") == 0)
			tcp = 1;
		else {
			fprintf(stderr, "usage: bw_unix SECONDS [unpinned] [tcp]\n");
			return 1;
		}
	}
	/* What one write carries: lmbench's 64 KiB, or netperf's 10 KiB messages. */
	size_t xfer = tcp ? 10 * 1024 : XFER;
	int fds[2];
	if (tcp ? tcp_pair(fds) : socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
		perror(tcp ? "tcp_pair" : "socketpair");
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
		while (off < xfer) {
			ssize_t n = write(fds[0], buf + off, xfer - off);
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
	fprintf(stderr, "bw_unix: %lu messages of %zu KiB in %.1f s\n", sent, xfer / 1024, seconds);
	return 0;
}
