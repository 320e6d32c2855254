/* protofloor: the least a server of sluice's line protocols can do, the C
 * floor beside which bench/anvil.sh, bench/policy.sh and bench/throttle.sh
 * print each server's CPU time per request. One thread, epoll, nonblocking
 * sockets; every complete request in a read is answered with a static reply,
 * the replies of one read in one write. No limiter, no table, no parsing
 * beyond finding where a request ends and (anvil) its first line. No
 * timeouts, no logging. What a server spends above it is what its own work
 * (deciding, counting, its runtime) costs.
 *
 *   anvil     Postfix's anvil(8) protocol (docs/protocols/anvil.md): sends
 *             "protocol=anvil_protocol\n\n" on accept; each request ends
 *             with an empty line and is answered by its first line,
 *             "request=<name>": connect "status=0 count=1 rate=1",
 *             message, recipient, newtls, newtls_status, auth, tlstr
 *             "status=0 rate=1", disconnect "status=0", lookup all six
 *             counters at 1, anything else "status=-1".
 *   policy    Postfix's policy delegation: each request ends with an empty
 *             line and is answered "action=DUNNO\n\n" (bench/policyfloor is
 *             the same floor in Go).
 *   throttle  sluice's throttle protocol (internal/throttle/protocol.go):
 *             the first line (ACQUIRE <key>) is answered "OK <now>\n", now in
 *             Unix nanoseconds; what follows (DONE, a REPORT) is read and
 *             ignored until the client closes.
 *
 * ADDRESS is unix:PATH (the socket is created mode 0666) or HOST:PORT (an
 * IPv4 address). It stops on SIGTERM or SIGINT (and removes a UNIX socket).
 * A request longer than the buffer (8 KiB), or a reply that does not fit the
 * socket's send buffer at once, closes that connection: neither happens with
 * the bench's load generators, which send one request at a time.
 *
 * usage: protofloor anvil|policy|throttle ADDRESS */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUF 8192

enum proto { ANVIL, POLICY, THROTTLE };

struct conn {
	int fd;
	size_t len;    /* bytes of an unfinished request in buf */
	int answered;  /* throttle: the ACQUIRE line was answered */
	char buf[BUF];
	char out[BUF]; /* the replies of one read */
};

static enum proto proto;
static volatile sig_atomic_t stop;

static void on_signal(int sig) {
	(void)sig;
	stop = 1;
}

/* anvil_reply is the static reply to the anvil request whose first line
 * starts at req. */
static const char *anvil_reply(const char *req, size_t n) {
	static const struct {
		const char *line, *reply;
	} t[] = {
		{"request=connect\n", "status=0\ncount=1\nrate=1\n\n"},
		{"request=disconnect\n", "status=0\n\n"},
		{"request=message\n", "status=0\nrate=1\n\n"},
		{"request=recipient\n", "status=0\nrate=1\n\n"},
		{"request=newtls\n", "status=0\nrate=1\n\n"},
		{"request=newtls_status\n", "status=0\nrate=1\n\n"},
		{"request=auth\n", "status=0\nrate=1\n\n"},
		{"request=tlstr\n", "status=0\nrate=1\n\n"},
		{"request=lookup\n", "status=0\ncount=1\nrate=1\nmail=1\nrcpt=1\nnewtls=1\nauth=1\n\n"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		size_t l = strlen(t[i].line);
		if (n >= l && memcmp(req, t[i].line, l) == 0)
			return t[i].reply;
	}
	return "status=-1\n\n";
}

/* drop closes c. */
static void drop(int ep, struct conn *c) {
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

/* answer appends the replies to the complete requests in c->buf to c->out
 * and keeps the unfinished rest; it returns the reply bytes, or -1 if the
 * replies overflow c->out. */
static ssize_t answer(struct conn *c) {
	size_t o = 0, start = 0, i;
	if (proto == THROTTLE) {
		char *nl = memchr(c->buf, '\n', c->len);
		c->len = 0; /* lines after the first are ignored */
		if (c->answered || nl == NULL)
			return 0;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		c->answered = 1;
		return snprintf(c->out, BUF, "OK %lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
	}
	/* A request ends at an empty line: "\n\n", or "\n" at its start. */
	for (i = 0; i < c->len; i++) {
		if (c->buf[i] != '\n' || (i > start && c->buf[i - 1] != '\n'))
			continue;
		const char *r = proto == POLICY ? "action=DUNNO\n\n" : anvil_reply(c->buf + start, i - start);
		size_t l = strlen(r);
		if (o + l > BUF)
			return -1;
		memcpy(c->out + o, r, l);
		o += l;
		start = i + 1;
	}
	memmove(c->buf, c->buf + start, c->len - start);
	c->len -= start;
	return (ssize_t)o;
}

/* serve reads what c has sent and answers it; it returns -1 when c is to
 * be closed. */
static int serve(struct conn *c) {
	for (;;) {
		if (c->len == BUF)
			return -1; /* a request longer than the buffer */
		ssize_t n = read(c->fd, c->buf + c->len, BUF - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -1;
		c->len += (size_t)n;
		ssize_t o = answer(c);
		if (o < 0)
			return -1;
		if (o > 0 && write(c->fd, c->out, (size_t)o) != o)
			return -1;
	}
}

/* listen_on opens the listening socket for addr. */
static int listen_on(const char *addr) {
	int fd;
	if (strncmp(addr, "unix:", 5) == 0) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(addr + 5) >= sizeof sa.sun_path) {
			fprintf(stderr, "protofloor: socket path too long\n");
			exit(2);
		}
		strcpy(sa.sun_path, addr + 5);
		unlink(sa.sun_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		mode_t old = umask(0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
			perror("protofloor: bind");
			exit(1);
		}
		umask(old);
	} else {
		char host[64];
		const char *colon = strrchr(addr, ':');
		struct sockaddr_in sa = {.sin_family = AF_INET};
		if (colon == NULL || (size_t)(colon - addr) >= sizeof host) {
			fprintf(stderr, "protofloor: address %s is neither unix:PATH nor HOST:PORT\n", addr);
			exit(2);
		}
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = 0;
		sa.sin_port = htons((unsigned short)atoi(colon + 1));
		if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
			fprintf(stderr, "protofloor: %s is not an IPv4 address\n", host);
			exit(2);
		}
		int one = 1;
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd >= 0)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
			perror("protofloor: bind");
			exit(1);
		}
	}
	if (listen(fd, 1024) < 0) {
		perror("protofloor: listen");
		exit(1);
	}
	return fd;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: protofloor anvil|policy|throttle unix:PATH|HOST:PORT\n");
		return 2;
	}
	if (strcmp(argv[1], "anvil") == 0)
		proto = ANVIL;
	else if (strcmp(argv[1], "policy") == 0)
		proto = POLICY;
	else if (strcmp(argv[1], "throttle") == 0)
		proto = THROTTLE;
	else {
		fprintf(stderr, "protofloor: unknown protocol %s\n", argv[1]);
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: epoll_wait returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	int lfd = listen_on(argv[2]);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	struct epoll_event evs[256];
	while (!stop) {
		int n = epoll_wait(ep, evs, 256, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("protofloor: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					static const char hello[] = "protocol=anvil_protocol\n\n";
					if (proto == ANVIL && write(fd, hello, sizeof hello - 1) != sizeof hello - 1) {
						close(fd);
						continue;
					}
					c = calloc(1, sizeof *c);
					if (c == NULL) {
						close(fd);
						continue;
					}
					c->fd = fd;
					struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
				}
				continue;
			}
			if (serve(c) < 0)
				drop(ep, c);
		}
	}
	if (strncmp(argv[2], "unix:", 5) == 0)
		unlink(argv[2] + 5);
	return 0;
}
