package smtptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WaitLog calls read every interval until the text it returns contains
// substr, read fails, or ctx ends. An MTA logs asynchronously (Postfix
// through postlogd; Sendmail may log a line after the reply it describes
// has reached the client), so a harness polls its maillog; where names
// that log in the error.
func WaitLog(ctx context.Context, interval time.Duration, where string, read func() (string, error), substr string) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		log, err := read()
		if err != nil {
			return err
		}
		if strings.Contains(log, substr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %q in %s: %w", substr, where, ctx.Err())
		case <-tick.C:
		}
	}
}

// InstanceDir makes dir (relative or not) and returns its absolute path
// with symbolic links resolved, the form an MTA's configuration files
// name it by.
func InstanceDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve instance dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("create instance dir: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve instance dir %s: %w", dir, err)
	}
	return real, nil
}
