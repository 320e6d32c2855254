package docstest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOneVocabulary: the status page, `sluice status` and the docs call a
// decision that did not admit by the metric's word for it. The verdicts
// of sluice_decisions_total are ok, refused (a door refused), deferred
// (the throttle told a sender to wait) and dry_run; what the page and
// status list and count is every refusal, so they say "refused" and
// "refusals", never a synonym an alert could be built from by mistake.
func TestOneVocabulary(t *testing.T) {
	observe := readDoc(t, "internal/app/observe.go")
	var verdicts []string
	for _, m := range regexp.MustCompile(`verdict = "([a-z_]+)"|verdict := "([a-z_]+)"`).FindAllStringSubmatch(observe, -1) {
		verdicts = append(verdicts, m[1]+m[2])
	}
	slices.Sort(verdicts)
	if want := []string{"deferred", "dry_run", "ok", "refused"}; !slices.Equal(verdicts, want) {
		t.Fatalf("the metric's verdicts are %q, want %q (update this test and the words below)", verdicts, want)
	}
	for _, f := range []string{"internal/web/assets/index.html", "internal/web/assets/app.js", "internal/cli/status.go", "docs/operations.md"} {
		text := readDoc(t, f)
		for _, bad := range []string{"deferral", "Deferral", "deferred since", "Recent deferrals"} {
			if strings.Contains(text, bad) && !(f == "docs/operations.md" && bad == "deferral") {
				t.Errorf("%s says %q: the metric's word is refused (or deferred for the throttle)", f, bad)
			}
		}
	}
	page := readDoc(t, "internal/web/assets/index.html")
	for _, want := range []string{"Recent refusals", "Refusals/s"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if st := readDoc(t, "internal/cli/status.go"); !strings.Contains(st, "refused since start") || !strings.Contains(st, "recent refusals") {
		t.Error("sluice status does not say refused since start / recent refusals")
	}
}
