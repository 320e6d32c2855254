package status

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestJSONRoundTrip(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := Status{
		Version: "v1",
		Now:     now,
		Store:   &Store{Backend: "memory", Keys: 3, Healthy: true},
		Pool:    &Pool{Slots: []Slot{{State: SlotBusy, PID: 7, Tag: "scan x", Since: now}}, QueueSize: 4},
		Classes: []Class{{Name: "c", Incoming: 1, Total: 2, TotalCap: 9}},
		Refusals: []Refusal{{At: now, Door: "policy", Rule: "r", Key: "k", Count: 3, Limit: 2,
			Period: "1m", Algorithm: "exact", Verdict: "DEFER"}},
		Totals:  Totals{Decisions: 5, Refusals: 1},
		History: []Sample{{T: now.UnixMilli(), Busy: 1, Slots: 1, Decisions: 2.5}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{`"started"`, `"reload"`, `"incoming_cap"`, `"talkers"`} {
		if strings.Contains(string(b), absent) {
			t.Errorf("zero field %s encoded: %s", absent, b)
		}
	}
	var out Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}
