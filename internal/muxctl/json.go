package muxctl

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"
)

// The JSON views of md-mx-ctrl 3.6 and later (docs/protocols/mimedefang-multiplexor.md,
// "md-mx-ctrl"): jsonstatus asks the multiplexor for `status`, jsonload1
// N for `load1 N`, and each prints one JSON object in the reference's
// layout: its field order, its spacing (a space after the colon of
// "timestamp" and "hostname", after the comma between some fields and
// not others), the hostname as it is, without escaping. jsonstatus ends
// without a newline, jsonload1 with one, as the reference's do.

// now and hostname are the clock and the host's name the JSON views
// print; tests replace them.
var (
	now      = time.Now
	hostname = os.Hostname
)

// asctime is C's asctime(localtime(now)) without its newline (the
// reference prints "%.24s" of it): "Thu Nov  5 09:03:01 2026".
func asctime(t time.Time) string {
	s := t.Local().Format("Mon Jan _2 15:04:05 2006")
	if len(s) > 24 {
		s = s[:24]
	}
	return s
}

// hostName is gethostname's answer as the reference reads it (at most
// 1023 bytes; "" when it fails, as the reference's buffer would be empty
// then).
func hostName() string {
	h, err := hostname()
	if err != nil {
		return ""
	}
	if len(h) > 1023 {
		h = h[:1023]
	}
	return h
}

// jsonHead is the two fields every JSON view starts with, after its "{".
func jsonHead(b *bytes.Buffer, host string) {
	fmt.Fprintf(b, "{\"timestamp\": \"%s\",\"hostname\": \"%s\",", asctime(now()), host)
}

// jsonStatus is `md-mx-ctrl jsonstatus`: every slot of a status reply as
// "WorkerN": its state word; a reply that is not one is an error, as for
// status.
func jsonStatus(host string) func(r []byte, out, errw io.Writer) int {
	return func(r []byte, out, errw io.Writer) int {
		letters, ok := slotLetters(r, errw)
		if !ok {
			return 1
		}
		var b bytes.Buffer
		jsonHead(&b, host)
		for i, c := range letters {
			fmt.Fprintf(&b, "\"Worker%d\": ", i)
			switch c {
			case 'I':
				b.WriteString(`"idle"`)
			case 'K':
				b.WriteString(`"killed"`)
			case 'S':
				b.WriteString(`"stopped"`)
			case 'B':
				b.WriteString(`"busy"`)
			default:
				b.WriteString(`"unknown state '`)
				b.WriteByte(c)
				b.WriteString(`'"`)
			}
			if i < len(letters)-1 {
				b.WriteByte(',')
			}
		}
		b.WriteByte('}')
		_, _ = out.Write(b.Bytes())
		return 0
	}
}

// jsonLoad1 is `md-mx-ctrl jsonload1 N`: the worker counts, the commands
// in the window, the queue's size and length of a load1 reply. A reply
// without all 26 numbers is printed as it came, on out, with status 1.
func jsonLoad1(host string) func(r []byte, out, errw io.Writer) int {
	return func(r []byte, out, _ io.Writer) int {
		v, n := scan(r, "dffdffdffdffdddddddddddddd")
		if n != 26 {
			fmt.Fprintf(out, "Could not interpret response: %s", r)
			return 1
		}
		d := func(i int) int32 { return int32(v[i]) }
		var b bytes.Buffer
		jsonHead(&b, host)
		fmt.Fprintf(&b, "\"busyworkers\":%d, \"idleworkers\":%d, \"stoppedworkers\":%d, \"killedworkers\":%d,", d(12), d(13), d(14), d(15))
		fmt.Fprintf(&b, "\"scan\":%d, \"relayok\":%d, \"senderok\":%d, \"recipok\":%d,", d(0), d(3), d(6), d(9))
		fmt.Fprintf(&b, "\"queue_size\":%d, \"queued_requests\":%d}\n", d(18), d(19))
		_, _ = out.Write(b.Bytes())
		return 0
	}
}
