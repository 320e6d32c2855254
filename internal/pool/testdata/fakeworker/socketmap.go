package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// socketMap answers a "map NAME KEY" lookup: OK with the key reversed;
// map "nf" is NOTFOUND; see mapSpecial for the other test maps.
func socketMap(line string) {
	f := strings.SplitN(line, " ", 3)
	if len(f) == 3 && f[1] == "nf" {
		out.WriteString("NOTFOUND \n")
		return
	}
	if len(f) == 3 && mapSpecial(f[1], f[2]) {
		return
	}
	// The key is decoded, reversed and encoded again (a key with no
	// %XX is simply reversed).
	k := []rune(decode(f[len(f)-1]))
	for i, j := 0, len(k)-1; i < j; i, j = i+1, j-1 {
		k[i], k[j] = k[j], k[i]
	}
	fmt.Fprintf(out, "OK %s\n", encode(string(k)))
}

// mapSpecial acts for the socket-map test maps: "raw" answers with its
// key percent-decoded (so the test chooses the whole reply line), "die"
// exits without a reply, "hang" never answers, "partial" writes half a
// line and exits, "long" answers "OK " and n x's (n the key). It reports
// whether name was one of them.
func mapSpecial(name, key string) bool {
	switch name {
	case "raw":
		os.Stdout.WriteString(decode(key) + "\n")
	case "die":
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour)
	case "partial":
		os.Stdout.WriteString("OK part")
		os.Exit(0)
	case "long":
		n, _ := strconv.Atoi(key)
		os.Stdout.WriteString("OK " + strings.Repeat("x", n) + "\n")
	default:
		return false
	}
	return true
}

// decode and encode are the multiplexor's percent-encoding, written out
// here rather than taken from sluice/internal/percent: the fake worker
// plays MIMEDefang's side of socket-map lookups, whose keys and replies
// sluice encodes and decodes with that package, and an error there must
// not be made good by the same error here.

// decode undoes the multiplexor's percent-encoding (%XX, either case).
func decode(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// encode is the multiplexor's percent-encoding.
func encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("%\\'\"", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
