/* muxfloor: the least a multiplexor can be. One thread, epoll: it accepts
 * a connection, reads the request line, relays it over a pipe to an idle
 * worker (or queues it until one is idle), relays the worker's reply line
 * back and closes. "status" is answered at once from the workers' states.
 * No recycling, no limits, no logging, no statistics. It listens with
 * the multiplexors' backlog (BACKLOG).
 * usage: muxfloor SOCKET WORKERS WORKER-COMMAND BACKLOG */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAXW 64
#define LINE 4096

struct client {
	int fd;
	size_t len;
	char buf[LINE];
	struct client *next; /* queue of clients waiting for a worker */
};

struct worker {
	int in, out; /* its stdin (we write), its stdout (we read) */
	struct client *c; /* the client it serves, NULL when idle */
	size_t len;
	char buf[LINE];
};

static struct worker w[MAXW];
static int nw, ep;
static struct client *qhead, *qtail;
static const int LISTENER = -1;

static void done(struct client *c) {
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

static void put(int fd, const char *b, size_t n) {
	while (n > 0) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		b += k;
		n -= k;
	}
}

static void assign(struct worker *x, struct client *c) {
	x->c = c;
	x->len = 0;
	put(x->in, c->buf, c->len);
}

/* request: c has a whole line; answer status, or hand it to a worker. */
static void request(struct client *c) {
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->len == 7 && memcmp(c->buf, "status\n", 7) == 0) {
		char s[MAXW + 32];
		int i;
		for (i = 0; i < nw; i++)
			s[i] = w[i].c ? 'B' : 'I';
		int n = i + snprintf(s + i, sizeof s - i, " 0 0 0 0 0\n");
		put(c->fd, s, n);
		close(c->fd);
		free(c);
		return;
	}
	for (int i = 0; i < nw; i++)
		if (!w[i].c) {
			assign(&w[i], c);
			return;
		}
	c->next = NULL;
	if (qtail)
		qtail->next = c;
	else
		qhead = c;
	qtail = c;
}

static void reply(struct worker *x) {
	ssize_t n = read(x->out, x->buf + x->len, LINE - x->len);
	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		fprintf(stderr, "muxfloor: a worker exited\n");
		exit(1);
	}
	x->len += n;
	if (x->buf[x->len - 1] != '\n' || !x->c)
		return;
	put(x->c->fd, x->buf, x->len);
	close(x->c->fd);
	free(x->c);
	x->c = NULL;
	if (qhead) {
		struct client *c = qhead;
		qhead = c->next;
		if (!qhead)
			qtail = NULL;
		assign(x, c);
	}
}

int main(int argc, char **argv) {
	if (argc != 5 || (nw = atoi(argv[2])) < 1 || nw > MAXW || atoi(argv[4]) < 1) {
		fprintf(stderr, "usage: muxfloor SOCKET WORKERS(1-%d) WORKER-COMMAND BACKLOG\n", MAXW);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	ep = epoll_create1(0);
	for (int i = 0; i < nw; i++) {
		int a[2], b[2];
		if (pipe2(a, O_CLOEXEC) < 0 || pipe2(b, O_CLOEXEC) < 0)
			return 1;
		pid_t p = fork();
		if (p == 0) {
			dup2(a[0], 0);
			dup2(b[1], 1);
			execl(argv[3], argv[3], (char *)NULL);
			_exit(127);
		}
		close(a[0]);
		close(b[1]);
		w[i].in = a[1];
		w[i].out = b[0];
		fcntl(b[0], F_SETFL, O_NONBLOCK);
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = &w[i]};
		epoll_ctl(ep, EPOLL_CTL_ADD, b[0], &e);
	}
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[1]);
	unlink(sa.sun_path);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, atoi(argv[4])) < 0) {
		perror("muxfloor: listen");
		return 1;
	}
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = (void *)&LISTENER};
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &e);
	fprintf(stderr, "muxfloor: listening on %s with %d workers\n", argv[1], nw);
	struct epoll_event evs[64];
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);
		if (k < 0 && errno != EINTR)
			return 1;
		for (int i = 0; i < k; i++) {
			void *p = evs[i].data.ptr;
			if (p == &LISTENER) {
				int fd;
				while ((fd = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					struct client *c = calloc(1, sizeof *c);
					c->fd = fd;
					struct epoll_event ce = {.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ce);
				}
				continue;
			}
			if (p >= (void *)w && p < (void *)(w + MAXW)) {
				reply(p);
				continue;
			}
			struct client *c = p;
			ssize_t n = read(c->fd, c->buf + c->len, LINE - c->len);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0 || (c->len += n) == LINE) {
				done(c);
				continue;
			}
			if (c->buf[c->len - 1] == '\n')
				request(c);
		}
	}
}
