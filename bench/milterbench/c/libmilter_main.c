/* The main() of the libmilter milters (acceptall.c, connectonly.c): it
 * listens on the socket given (backlog 128, open to the Postfix user) and
 * runs libmilter's loop with the milter's smfiDesc, desc. */
#include <stdio.h>
#include <sys/stat.h>
#include <libmilter/mfapi.h>

extern struct smfiDesc desc;

int main(int argc, char **argv) {
	const char *name = desc.xxfi_name;
	if (argc != 2) {
		fprintf(stderr, "usage: %s unix:/path/to/socket\n", name);
		return 2;
	}
	umask(0); /* the Postfix user must be able to connect */
	if (smfi_setconn(argv[1]) == MI_FAILURE || smfi_setbacklog(128) == MI_FAILURE ||
	    smfi_register(desc) == MI_FAILURE || smfi_opensocket(1) == MI_FAILURE) {
		fprintf(stderr, "%s: cannot set up %s\n", name, argv[1]);
		return 1;
	}
	fprintf(stderr, "%s: listening on %s\n", name, argv[1]);
	return smfi_main() == MI_SUCCESS ? 0 : 1;
}
