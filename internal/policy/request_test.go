package policy

import (
	"errors"
	"strings"
	"testing"

	"sluice/internal/postfixattr"
)

// numbers are the attributes docs/protocols/policy.md says Postfix sends
// as numbers.
var numbers = map[string]bool{"recipient_count": true, "size": true, "encryption_keysize": true}

// TestEveryAttribute: every attribute of Postfix 2.1-3.12 has a field, a
// number for the numeric ones and text for the others; a numeric one that
// is not a non-negative decimal is refused, and an empty one is 0.
func TestEveryAttribute(t *testing.T) {
	var r Request
	for name := range postfixattr.Since {
		switch {
		case numbers[name] && r.number(name) == nil:
			t.Errorf("no numeric field for %s", name)
		case !numbers[name] && r.field(name) == nil:
			t.Errorf("no field for %s", name)
		}
	}
	for name := range numbers {
		if _, ok := postfixattr.Since[name]; !ok {
			t.Errorf("%s is no Postfix attribute", name)
		}
		var r Request
		err := NewDecoder(strings.NewReader("request=smtpd_access_policy\n"+name+"=12x\n\n"), Limits{}).Decode(&r)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s=12x: %v, want a protocol error", name, err)
		}
		r = Request{}
		err = NewDecoder(strings.NewReader("request=smtpd_access_policy\n"+name+"=\n\n"), Limits{}).Decode(&r)
		if v := r.number(name); err != nil || v == nil || *v != 0 {
			t.Errorf("%s empty: %v", name, err)
		}
	}
}
