package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mainClasses is the example's class table with include_dir set.
const mainClasses = "include_dir = \"conf.d\"\n[[class]]\nname = \"local\"\nmatch = [\"127.0.0.0/8\", \"::1\"]\n\n[[class]]\nname = \"everyone\"\nmatch = [\"*\"]\n"

// TestOrderWarnings: a class or throttle policy whose masks an earlier
// entry's masks cover, wholly or in part, is warned of with both names,
// the masks and how to order them; one that is only partly inside an
// earlier network, or covered only by several masks together, is not;
// policy rules, which all count, never are.
func TestOrderWarnings(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []string // one substring per warning, in order
	}{
		{"conf.d class inside local", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-monitor.toml": "[[class]]\nname = \"monitor\"\nmatch = [\"127.0.0.2\"]\n"},
			[]string{`class "monitor" (DIR/conf.d/10-monitor.toml:1) never matches: an earlier class matches every one of its peers first (127.0.0.2/32 inside "local"'s 127.0.0.0/8 at DIR/sluice.toml:2), and the first class that matches wins; a class that an include_dir file adds goes after the main file's classes, just before the catch-all "everyone": to have it tried before "local", define class "monitor" in DIR/sluice.toml above "local" (the include_dir file then changes it in place), or narrow "local"`}},
		{"conf.d class partly inside local", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-monitor.toml": "[[class]]\nname = \"monitor\"\nmatch = [\"192.0.2.0/24\", \"127.0.0.2\", \"::1\"]\n"},
			[]string{`class "monitor" (DIR/conf.d/10-monitor.toml:1): its masks 127.0.0.2/32, ::1/128 never match: an earlier class matches those peers first (127.0.0.2/32 inside "local"'s 127.0.0.0/8 at DIR/sluice.toml:2; ::1/128 inside "local"'s ::1/128 at DIR/sluice.toml:2)`}},
		{"conf.d class beside local", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-monitor.toml": "[[class]]\nname = \"monitor\"\nmatch = [\"192.0.2.0/24\", \"126.0.0.0/7\"]\n"}, nil},
		{"the example as shipped", map[string]string{"sluice.toml": mainClasses}, nil},
		{"narrower first", map[string]string{"sluice.toml": "[[class]]\nname = \"lab\"\nmatch = [\"10.1.0.0/16\"]\n[[class]]\nname = \"corp\"\nmatch = [\"10.0.0.0/8\"]\n[[class]]\nname = \"all\"\nmatch = [\"*\"]\n"}, nil},
		{"covered only together", map[string]string{"sluice.toml": "[[class]]\nname = \"lo\"\nmatch = [\"10.0.0.0/9\"]\n[[class]]\nname = \"hi\"\nmatch = [\"10.128.0.0/9\"]\n[[class]]\nname = \"ten\"\nmatch = [\"10.0.0.0/8\"]\n[[class]]\nname = \"all\"\nmatch = [\"*\"]\n"}, nil},
		{"domain in the main file", map[string]string{"sluice.toml": "[[class]]\nname = \"org\"\nmatch = [\"*.example.org\"]\n[[class]]\nname = \"mx\"\nmatch = [\"MX.example.org.\"]\n[[class]]\nname = \"all\"\nmatch = [\"*\"]\n"},
			[]string{`class "mx" (DIR/sluice.toml:4) never matches: an earlier class matches every one of its peers first (mx.example.org inside "org"'s *.example.org at DIR/sluice.toml:1), and the first class that matches wins; to have it tried first, move it above "org", or narrow "org"`}},
		{"a name is not an address", map[string]string{"sluice.toml": "[[class]]\nname = \"org\"\nmatch = [\"*.example.org\"]\n[[class]]\nname = \"ip\"\nmatch = [\"192.0.2.1\"]\n[[class]]\nname = \"all\"\nmatch = [\"*\"]\n"}, nil},
		{"a catch-all in the middle", map[string]string{"sluice.toml": "[[class]]\nname = \"first\"\nmatch = [\"*\"]\nrefuse = 5\n[[class]]\nname = \"lan\"\nmatch = [\"10.0.0.0/8\"]\n[[class]]\nname = \"all\"\nmatch = [\"*\"]\n"},
			[]string{`class "lan" (DIR/sluice.toml:5) never matches`, `class "all" (DIR/sluice.toml:8) never matches: an earlier class matches every one of its peers first (* inside "first"'s * at DIR/sluice.toml:1), and the first class that matches wins; the catch-all class stays last: narrow "first", which takes every peer before it`}},
		{"two conf.d files", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-corp.toml": "[[class]]\nname = \"corp\"\nmatch = [\"10.0.0.0/8\"]\n",
			"conf.d/20-lab.toml":  "[[class]]\nname = \"lab\"\nmatch = [\"10.1.0.0/16\"]\n"},
			[]string{`class "lab" (DIR/conf.d/20-lab.toml:1) never matches: an earlier class matches every one of its peers first (10.1.0.0/16 inside "corp"'s 10.0.0.0/8 at DIR/conf.d/10-corp.toml:1), and the first class that matches wins; include_dir's files are merged in name order, each new class going just before the catch-all "everyone": to have it tried before "corp", give 20-lab.toml a name that sorts before 10-corp.toml, or narrow "corp"`}},
		{"one conf.d file", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-corp.toml": "[[class]]\nname = \"corp\"\nmatch = [\"10.0.0.0/8\"]\n[[class]]\nname = \"lab\"\nmatch = [\"10.1.0.0/16\"]\n"},
			[]string{`to have it tried first, move it above "corp" in DIR/conf.d/10-corp.toml`}},
		{"conf.d narrows local in place", map[string]string{"sluice.toml": mainClasses,
			"conf.d/10-local.toml": "[[class]]\nname = \"local\"\nmatch = [\"127.0.0.1\"]\n[[class]]\nname = \"monitor\"\nmatch = [\"127.0.0.2\"]\n"}, nil},
		{"classes_file after [[class]]", map[string]string{"sluice.toml": "classes_file = \"xla.classes\"\n[[class]]\nname = \"local\"\nmatch = [\"127.0.0.0/8\"]\n",
			"xla.classes": "L127.0.0.5 2 0\nL192.0.2.0/24 2 0\nL* 10 10\n"},
			[]string{`class "127.0.0.5/32" (DIR/xla.classes:1) never matches: an earlier class matches every one of its peers first (127.0.0.5/32 inside "local"'s 127.0.0.0/8 at DIR/sluice.toml:2), and the first class that matches wins; classes_file's classes come after every [[class]]: to have it tried before "local", make it a [[class]] above "local", or narrow "local"`}},
		{"throttle policy after a catch-all", map[string]string{"sluice.toml": "include_dir = \"conf.d\"\n[[throttle.policy]]\nname = \"smarthost\"\nmatch = [\"*\"]\nlimit = \"8/60s\"\n",
			"conf.d/10-gmail.toml": "[[throttle.policy]]\nname = \"gmail\"\nmatch = [\"*.gmail.com\", \"gmail.com\"]\nlimit = \"2/1s\"\n"},
			[]string{`throttle.policy "gmail" (DIR/conf.d/10-gmail.toml:1) never matches: an earlier policy matches every one of its keys first (*.gmail.com inside "smarthost"'s * at DIR/sluice.toml:2; gmail.com inside "smarthost"'s * at DIR/sluice.toml:2), and the first policy that matches wins; a policy that an include_dir file adds goes after the main file's policies: to have it tried before "smarthost", define policy "gmail" in DIR/sluice.toml above "smarthost" (the include_dir file then changes it in place), or narrow "smarthost"`}},
		{"throttle off", map[string]string{"sluice.toml": "[throttle]\nenabled = false\n[[throttle.policy]]\nname = \"smarthost\"\nmatch = [\"*\"]\nlimit = \"8/60s\"\n[[throttle.policy]]\nname = \"gmail\"\nmatch = [\"gmail.com\"]\nlimit = \"2/1s\"\n"}, nil},
		{"policy rules all count", map[string]string{"sluice.toml": "[[policy.rule]]\nname = \"wide\"\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"100/1h\"]\n[[policy.rule]]\nname = \"narrow\"\nsender_domain = [\"example.org\"]\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"10/1h\"]\n"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTree(t, c.files)
			if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg, errs := Load(filepath.Join(dir, "sluice.toml"))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			got := cfg.OrderWarnings()
			if len(got) != len(c.want) {
				t.Fatalf("%d warnings, want %d:\n%s", len(got), len(c.want), strings.Join(got, "\n"))
			}
			for i, w := range c.want {
				if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(got[i], w) {
					t.Errorf("warning %d:\n%s\nlacks\n%s", i+1, got[i], w)
				}
			}
		})
	}
}
