package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretWarning(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		warn       bool
	}{
		{"password, world-readable", "[store.redis]\npassword = \"s3cret\"\n", 0o644, true},
		{"sentinel password, world-readable", "[store.redis]\nsentinel_password = \"s3cret\"\n", 0o604, true},
		{"password, group only", "[store.redis]\npassword = \"s3cret\"\n", 0o640, false},
		{"no password, world-readable", "[store.redis]\npassword_file = \"/etc/sluice/redis.pass\"\n", 0o644, false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml")
		if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		c, errs := Load(path)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tc.name, errs)
		}
		w := SecretWarning(path, c)
		if (w != "") != tc.warn || (tc.warn && !strings.Contains(w, "every user may read it")) {
			t.Errorf("%s: %q", tc.name, w)
		}
	}
	if w := SecretWarning("", Default()); w != "" {
		t.Errorf("the embedded defaults: %q", w)
	}
}
