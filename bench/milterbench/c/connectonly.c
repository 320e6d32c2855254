/* connectonly: a CONNECT-only milter on libmilter, as an administrator
 * would write one: a connect callback answering SMFIS_CONTINUE, and
 * xxfi_negotiate switching every other step off (and its reply).
 * Built by bench/milterbench with libmilter_main.c. */
#include <stdio.h>
#include <stdlib.h>
#include <libmilter/mfapi.h>

static sfsistat xconnect(SMFICTX *c, char *host, _SOCK_ADDR *sa) { return SMFIS_CONTINUE; }

static sfsistat xnegotiate(SMFICTX *c, unsigned long f0, unsigned long f1, unsigned long f2,
                           unsigned long f3, unsigned long *pf0, unsigned long *pf1,
                           unsigned long *pf2, unsigned long *pf3) {
	unsigned long off = SMFIP_NOHELO | SMFIP_NOMAIL | SMFIP_NORCPT | SMFIP_NOBODY | SMFIP_NOHDRS |
	                    SMFIP_NOEOH | SMFIP_NOUNKNOWN | SMFIP_NODATA | SMFIP_NR_HDR | SMFIP_NR_HELO |
	                    SMFIP_NR_MAIL | SMFIP_NR_RCPT | SMFIP_NR_DATA | SMFIP_NR_UNKN | SMFIP_NR_EOH |
	                    SMFIP_NR_BODY;
	*pf0 = 0;
	*pf1 = f1 & off;
	*pf2 = 0;
	*pf3 = 0;
	return SMFIS_CONTINUE;
}

struct smfiDesc desc = {
	"connectonly", SMFI_VERSION, 0,
	xconnect, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	NULL, NULL, NULL, NULL,
	xnegotiate,
};
