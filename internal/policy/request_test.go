package policy

import (
	"testing"

	"sluice/internal/postfixattr"
)

// TestEveryAttribute: every attribute of Postfix 2.1-3.12 has a field.
func TestEveryAttribute(t *testing.T) {
	var r Request
	for name := range postfixattr.Since {
		if postfixattr.Numeric[name] {
			if r.number(name) == nil {
				t.Errorf("no numeric field for %s", name)
			}
		} else if r.field(name) == nil {
			t.Errorf("no field for %s", name)
		}
	}
}
