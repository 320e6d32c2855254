package app

import (
	"context"
	"testing"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
)

// startPostfix starts a private Postfix instance with mainCF (its own
// anvil service when ownAnvil, else none: sluice's takes its place),
// stopped at the test's end with its maillog printed if the test failed.
// It returns the instance and its SMTP port.
func startPostfix(t *testing.T, ownAnvil bool, mainCF map[string]string) (*postfixtest.Instance, int) {
	t.Helper()
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	port, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mtaGuard)
	defer cancel()
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: t.TempDir(), SMTPPort: port, OwnAnvil: ownAnvil, MainCF: mainCF, Logf: t.Logf})
	return inst, port
}
