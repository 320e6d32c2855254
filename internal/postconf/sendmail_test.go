package postconf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/sendmailcf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
	"sluice/internal/testutil/sendmailtest"
)

// TestSendmailCapacity: the capacity is read from a sendmail.cf that
// Sendmail's own m4 macros built from a sendmail.mc with
// confMAX_DAEMON_CHILDREN, with docs/flood.md's [mta] recipe; built
// without it (Sendmail's default, no limit), the capacity is refused.
func TestSendmailCapacity(t *testing.T) {
	if err := sendmailtest.Available(); err != nil {
		peer.Missing(t, "a private Sendmail instance", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := recipe.Get(t, "docs/flood.md", "sendmail-capacity")
	const docPath = "/etc/mail/sendmail.cf"
	if !strings.Contains(rec, docPath) {
		t.Fatalf("docs/flood.md's sendmail-capacity recipe does not name %s:\n%s", docPath, rec)
	}
	for _, tc := range []struct {
		children int
		want     int64
	}{{12, 12}, {0, 0}} {
		inst, err := sendmailtest.Prepare(ctx, sendmailtest.Options{Dir: t.TempDir(), MaxDaemonChildren: tc.children, Logf: t.Logf})
		if err != nil {
			t.Fatalf("prepare sendmail: %v", err)
		}
		cfg, errs := config.Parse([]byte(strings.Replace(rec, docPath, inst.CFPath(), 1)), "recipe.toml")
		if len(errs) > 0 {
			t.Fatalf("the recipe does not parse: %v", errs)
		}
		c, err := MTACapacity(ctx, cfg)
		if tc.want == 0 {
			if !errors.Is(err, sendmailcf.ErrNoLimit) {
				t.Fatalf("sendmail.cf without confMAX_DAEMON_CHILDREN: capacity %+v, %v; want ErrNoLimit", c, err)
			}
			continue
		}
		if err != nil || c.Sessions != tc.want || !strings.Contains(c.From, inst.CFPath()+": MaxDaemonChildren") {
			t.Fatalf("capacity %+v, %v; want %d from %s", c, err, tc.want, inst.CFPath())
		}
	}
}
