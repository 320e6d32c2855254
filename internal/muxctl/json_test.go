package muxctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// fixJSONEnv makes the JSON views print a fixed time and host name.
func fixJSONEnv(t *testing.T, host string, err error) {
	oldNow, oldHost := now, hostname
	now = func() time.Time { return time.Date(2026, 11, 5, 9, 3, 1, 0, time.Local) }
	hostname = func() (string, error) { return host, err }
	t.Cleanup(func() { now, hostname = oldNow, oldHost })
}

// jsonFields parses one JSON object with encoding/json and returns its
// keys in order and its values.
func jsonFields(t *testing.T, s string) ([]string, map[string]any) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var keys []string
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
	}
	return keys, m
}

// A load1 reply: 12 numbers per command kind (count, average workers,
// average ms), busy idle stopped killed, msgs activations queue-size
// queued uptime back, and the commands running now.
const load1Reply = "7 0.50 12.5 3 0.10 1.0 2 0.00 0.5 9 0.20 2.0 1 2 5 0 40 8 3 1 3600 60 1 0 0 0\n"

// jsonstatus and jsonload1 N print md-mx-ctrl 3.7.1's JSON: compared
// with the documented layout byte for byte, and parsed with encoding/json
// field by field (names, order, values).
func TestJSONViews(t *testing.T) {
	fixJSONEnv(t, "mx1.example.org", nil)
	ctx := context.Background()
	asked := make(chan string, 1)
	reply := make(chan string, 1)
	sock := serve(t, func(c net.Conn) {
		asked <- readLine(c)
		c.Write([]byte(<-reply))
	})
	cl := &Client{Socket: sock}
	run := func(line, r string) (string, string, int) {
		t.Helper()
		reply <- r
		var out, errs bytes.Buffer
		code := cl.Run(ctx, line, &out, &errs)
		return <-asked, out.String(), code
	}

	req, out, code := run("jsonstatus\n", "IBSK 40 8 3 1 3600\n")
	wantOut := `{"timestamp": "Thu Nov  5 09:03:01 2026","hostname": "mx1.example.org",` +
		`"Worker0": "idle","Worker1": "busy","Worker2": "stopped","Worker3": "killed"}`
	if req != "status\n" || code != 0 || out != wantOut {
		t.Errorf("jsonstatus: asked %q, %d\n%q\nwant\n%q", req, code, out, wantOut)
	}
	keys, m := jsonFields(t, out)
	wantKeys := []string{"timestamp", "hostname", "Worker0", "Worker1", "Worker2", "Worker3"}
	wantVals := []any{"Thu Nov  5 09:03:01 2026", "mx1.example.org", "idle", "busy", "stopped", "killed"}
	for i, k := range wantKeys {
		if i >= len(keys) || keys[i] != k || m[k] != wantVals[i] {
			t.Errorf("jsonstatus field %d: keys %q, %s=%v, want %s=%v", i, keys, k, m[k], k, wantVals[i])
		}
	}

	req, out, code = run("jsonload1 60\n", load1Reply)
	wantOut = `{"timestamp": "Thu Nov  5 09:03:01 2026","hostname": "mx1.example.org",` +
		`"busyworkers":1, "idleworkers":2, "stoppedworkers":5, "killedworkers":0,` +
		`"scan":7, "relayok":3, "senderok":2, "recipok":9,` +
		`"queue_size":3, "queued_requests":1}` + "\n"
	if req != "load1 60\n" || code != 0 || out != wantOut {
		t.Errorf("jsonload1: asked %q, %d\n%q\nwant\n%q", req, code, out, wantOut)
	}
	keys, m = jsonFields(t, out)
	wantKeys = []string{"timestamp", "hostname", "busyworkers", "idleworkers", "stoppedworkers", "killedworkers",
		"scan", "relayok", "senderok", "recipok", "queue_size", "queued_requests"}
	wantVals = []any{"Thu Nov  5 09:03:01 2026", "mx1.example.org", 1.0, 2.0, 5.0, 0.0, 7.0, 3.0, 2.0, 9.0, 3.0, 1.0}
	for i, k := range wantKeys {
		if i >= len(keys) || keys[i] != k || m[k] != wantVals[i] {
			t.Errorf("jsonload1 field %d: keys %q, %s=%v, want %s=%v", i, keys, k, m[k], k, wantVals[i])
		}
	}
}

// Replies the JSON views cannot use: status's error, load1's "Could not
// interpret response" on stdout, status 1; none panics. A host name that
// cannot be read prints empty, as the reference's buffer.
func TestJSONViewsOddReplies(t *testing.T) {
	fixJSONEnv(t, "", errors.New("no name"))
	ctx := context.Background()
	reply := make(chan string, 1)
	sock := serve(t, func(c net.Conn) {
		readLine(c)
		c.Write([]byte(<-reply))
	})
	cl := &Client{Socket: sock}
	head := `{"timestamp": "Thu Nov  5 09:03:01 2026","hostname": "",`
	for _, c := range []struct {
		line, reply, out, errs string
		code                   int
	}{
		{"jsonstatus\n", "", "", "ERROR ", 1},
		{"jsonstatus\n", "error: oops\n", "", "ERROR error: oops\n", 1},
		{"jsonstatus\n", "I", head + `"Worker0": "idle"}`, "", 0},
		{"jsonstatus\n", "IB\n", head + `"Worker0": "idle","Worker1": "busy","Worker2": "unknown state '` + "\n" + `'"}`, "", 0},
		{"jsonstatus\n", "I\x00B 1", head + `"Worker0": "idle"}`, "", 0},
		{"jsonload1 60\n", "", "Could not interpret response: ", "", 1},
		{"jsonload1 60\n", "error: Invalid 'back' argument\n", "Could not interpret response: error: Invalid 'back' argument\n", "", 1},
		{"jsonload1 60\n", strings.Repeat("1 ", 25), "Could not interpret response: " + strings.Repeat("1 ", 25), "", 1},
		{"jsonload1 60\n", "1 x" + strings.Repeat(" 1", 24), "Could not interpret response: 1 x" + strings.Repeat(" 1", 24), "", 1},
		{"jsonload1 x\n", strings.Repeat("1 ", 12) + "99999999999 -4 0 7" + strings.Repeat(" 2", 10), head +
			`"busyworkers":1215752191, "idleworkers":-4, "stoppedworkers":0, "killedworkers":7,` +
			`"scan":1, "relayok":1, "senderok":1, "recipok":1,"queue_size":2, "queued_requests":2}` + "\n", "", 0},
		{"jsonload1 60\n", strings.Repeat("1 ", 12) + "nan" + strings.Repeat(" 2", 13), "Could not interpret response: " +
			strings.Repeat("1 ", 12) + "nan" + strings.Repeat(" 2", 13), "", 1},
	} {
		reply <- c.reply
		var out, errs bytes.Buffer
		code := cl.Run(ctx, c.line, &out, &errs)
		if code != c.code || out.String() != c.out || errs.String() != c.errs {
			t.Errorf("%q with reply %q: %d\n%q\n%q\nwant %d\n%q\n%q", c.line, c.reply, code, out.String(), errs.String(), c.code, c.out, c.errs)
		}
	}
}

// The timestamp is asctime's: the day of the month padded to two
// columns, 24 characters.
func TestAsctime(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 11, 5, 9, 3, 1, 0, time.Local), "Thu Nov  5 09:03:01 2026"},
		{time.Date(2026, 11, 26, 23, 59, 59, 999, time.Local), "Thu Nov 26 23:59:59 2026"},
		{time.Date(12026, 1, 1, 0, 0, 0, 0, time.Local), "Thu Jan  1 00:00:00 12026"[:24]},
	} {
		if got := asctime(c.t); got != c.want {
			t.Errorf("asctime(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}
