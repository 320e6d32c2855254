package recipe

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEveryRecipeParses: every docs page's recipes are found, named once,
// and not empty; a page with a marker that is not followed by a block is
// an error a test would otherwise miss.
func TestEveryRecipeParses(t *testing.T) {
	pages, _ := filepath.Glob(filepath.Join(Root(), "docs", "*.md"))
	n := 0
	for _, p := range pages {
		rel, _ := filepath.Rel(Root(), p)
		all, err := All(rel)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if markers := countMarkers(string(b)); markers != len(all) {
			t.Errorf("%s: %d recipe markers but %d recipes read", rel, markers, len(all))
		}
		for name, r := range all {
			if r == "" {
				t.Errorf("%s: recipe %s is empty", rel, name)
			}
		}
		n += len(all)
	}
	if n < 2 {
		t.Fatalf("only %d recipes in docs/", n)
	}
}

func countMarkers(s string) int {
	n := 0
	for i := 0; i+len("<!-- recipe: ") <= len(s); i++ {
		if s[i:i+len("<!-- recipe: ")] == "<!-- recipe: " {
			n++
		}
	}
	return n
}

func TestMainCF(t *testing.T) {
	got := MainCF(t, "# main.cf\nsmtpd_milters = inet:127.0.0.1:8891\nsmtpd_end_of_data_restrictions =\n    check_policy_service { inet:127.0.0.1:10040,\n\ttimeout=10s }\n\nmilter_default_action = tempfail  # not a comment to Postfix\n")
	want := map[string]string{
		"smtpd_milters":                  "inet:127.0.0.1:8891",
		"smtpd_end_of_data_restrictions": "check_policy_service { inet:127.0.0.1:10040, timeout=10s }",
		"milter_default_action":          "tempfail  # not a comment to Postfix",
	}
	if len(got) != len(want) {
		t.Fatalf("MainCF = %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("MainCF[%s] = %q, want %q", k, got[k], v)
		}
	}
}
