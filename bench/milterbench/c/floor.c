#define _GNU_SOURCE
/* floor: the least a CONNECT-only milter can be. One thread, epoll, no
 * limiter: it answers OPTNEG with the negotiation sluice's class-caps
 * milter sends (version 6, no actions, every step but CONNECT off and
 * reply-less) and CONNECT and END-OF-MESSAGE with CONTINUE, from static
 * buffers; every other packet is read and dropped. QUIT closes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const unsigned char optneg[17] = {0, 0, 0, 13, 'O', 0, 0, 0, 6, 0, 0, 0, 0, 0, 0x0f, 0xe3, 0xfe};
static const unsigned char cont[5] = {0, 0, 0, 1, 'c'};

struct conn {
	int fd;
	size_t len, cap;
	unsigned char *buf;
};

static void drop(int ep, struct conn *c) {
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->buf);
	free(c);
}

/* serve handles the complete packets in c's buffer; -1 ends the connection. */
static int serve(struct conn *c) {
	size_t off = 0;
	while (c->len - off >= 5) {
		unsigned char *p = c->buf + off;
		size_t n = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
		if (n == 0 || n > (1 << 20))
			return -1;
		if (c->len - off < 4 + n)
			break;
		const unsigned char *out = NULL;
		size_t outlen = 0;
		switch (p[4]) {
		case 'O': out = optneg; outlen = sizeof optneg; break;
		case 'C': case 'E': out = cont; outlen = sizeof cont; break;
		case 'Q': return -1;
		}
		if (out && write(c->fd, out, outlen) != (ssize_t)outlen)
			return -1;
		off += 4 + n;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: floor /path/to/socket\n");
		return 2;
	}
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", argv[1]);
	unlink(a.sun_path);
	umask(0); /* the Postfix user must be able to connect */
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0) {
		perror("floor: listen");
		return 1;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	fprintf(stderr, "floor: listening on %s\n", argv[1]);
	struct epoll_event evs[64];
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);
		if (k < 0 && errno != EINTR)
			return 1;
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					c = calloc(1, sizeof *c);
					c->fd = fd;
					c->cap = 4096;
					c->buf = malloc(c->cap);
					struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
				}
				continue;
			}
			for (;;) {
				if (c->cap - c->len < 4096) {
					c->cap *= 2;
					c->buf = realloc(c->buf, c->cap);
				}
				ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
				if (n > 0) {
					c->len += n;
					if (serve(c) < 0) {
						drop(ep, c);
						break;
					}
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				drop(ep, c);
				break;
			}
		}
	}
}
