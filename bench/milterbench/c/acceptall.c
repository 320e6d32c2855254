/* acceptall: a milter on libmilter that asks for every step and accepts.
 * Built by bench/milterbench with libmilter_main.c. */
#include <stdio.h>
#include <stdlib.h>
#include <libmilter/mfapi.h>

static sfsistat xconnect(SMFICTX *c, char *host, _SOCK_ADDR *sa) { return SMFIS_CONTINUE; }
static sfsistat xhelo(SMFICTX *c, char *helo) { return SMFIS_CONTINUE; }
static sfsistat xenvfrom(SMFICTX *c, char **argv) { return SMFIS_CONTINUE; }
static sfsistat xenvrcpt(SMFICTX *c, char **argv) { return SMFIS_CONTINUE; }
static sfsistat xheader(SMFICTX *c, char *name, char *value) { return SMFIS_CONTINUE; }
static sfsistat xeoh(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xbody(SMFICTX *c, unsigned char *chunk, size_t len) { return SMFIS_CONTINUE; }
static sfsistat xeom(SMFICTX *c) { return SMFIS_ACCEPT; }
static sfsistat xabort(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xclose(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xunknown(SMFICTX *c, const char *cmd) { return SMFIS_CONTINUE; }
static sfsistat xdata(SMFICTX *c) { return SMFIS_CONTINUE; }

struct smfiDesc desc = {
	"acceptall", SMFI_VERSION, 0,
	xconnect, xhelo, xenvfrom, xenvrcpt, xheader, xeoh, xbody, xeom,
	xabort, xclose, xunknown, xdata,
	NULL, /* no xxfi_negotiate: every step with a callback is asked for */
};
