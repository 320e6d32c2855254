package governor

import (
	"fmt"
	"testing"
)

// BenchmarkAnvilSession is one smtpd session as anvil sees it: connect,
// two messages, three recipients, disconnect (7 requests).
func BenchmarkAnvilSession(b *testing.B) {
	f := newFixture(&testing.T{}, nil, AnvilRules{})
	idents := make([]string, 1000)
	for i := range idents {
		idents[i] = fmt.Sprintf("smtp:10.1.%d.%d", i>>8, i&255)
	}
	var st AnvilStream
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := idents[i%len(idents)]
		if _, _, err := f.g.AnvilConnect(f.ctx, &st, id); err != nil {
			b.Fatal(err)
		}
		for _, ev := range []AnvilEvent{AnvilMail, AnvilRcpt, AnvilRcpt, AnvilMail, AnvilRcpt} {
			if _, err := f.g.AnvilEvent(f.ctx, &st, ev, id); err != nil {
				b.Fatal(err)
			}
		}
		f.g.AnvilDisconnect(f.ctx, &st, id)
		i++
	}
}
