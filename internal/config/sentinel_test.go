package config

import (
	"os"
	"path/filepath"
	"testing"
)

// master_set alone (Addrs the Sentinels) is a valid store; with cluster it
// is not (testdata/bad/redis-sentinel.toml has the messages).
func TestRedisMasterSet(t *testing.T) {
	for _, tc := range []struct {
		body string
		errs int
	}{
		{`addrs = ["127.0.0.1:26379", "[::1]:26380"]` + "\nmaster_set = \"mymaster\"", 0},
		{`addrs = ["127.0.0.1:26379"]` + "\nmaster_set = \"mymaster\"\ndb = 3", 0},
		{`addrs = ["127.0.0.1:26379"]` + "\nmaster_set = \"my master\"", 1},
		{`addrs = ["127.0.0.1:26379"]` + "\nmaster_set = \"m\"\ncluster = true", 1},
		{`addrs = ["127.0.0.1:26379"]` + "\nmaster_set = \"mymaster\"\nsentinel_username = \"w\"\nsentinel_password_file = \"s.pass\"", 0},
		{`addrs = ["127.0.0.1:26379"]` + "\nmaster_set = \"mymaster\"\nsentinel_password_file = \"missing.pass\"", 1},
		{`addrs = ["127.0.0.1:6379"]` + "\nsentinel_password = \"x\"", 1},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "s.pass"), []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "c.toml")
		body := "[store]\nkind = \"redis\"\n[store.redis]\n" + tc.body + "\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, errs := Load(path)
		if len(errs) != tc.errs {
			t.Errorf("%q: %d errors, want %d: %v", tc.body, len(errs), tc.errs, errs)
			continue
		}
		if tc.errs == 0 && cfg.Store.Redis.MasterSet != "mymaster" {
			t.Errorf("%q: master_set read as %q", tc.body, cfg.Store.Redis.MasterSet)
		}
	}
}
