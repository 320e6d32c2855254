// Command fakeworker is a scriptable mimedefang worker for the pool and
// mux tests: it reads one command line at a time from stdin and acts on
// its first word (see the switch below); it exits at EOF.
//
// Its environment sets behaviours for every request: FAKEWORKER_EXIT_AT_START
// makes it exit (status 2) before reading anything; FAKEWORKER_START_MS
// makes it wait that many milliseconds before reading its first command;
// FAKEWORKER_EXIT_AFTER=n makes it exit (status 0) after answering n
// commands; FAKEWORKER_TAG_MS sets how long "tag" takes (400 ms) and
// FAKEWORKER_SLOW_MS a "slow" request (500 ms);
// FAKEWORKER_LINGER keeps it alive an hour after EOF.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv("FAKEWORKER_EXIT_AT_START") != "" {
		os.Exit(2)
	}
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_START_MS")); err == nil && ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	exitAfter, _ := strconv.Atoi(os.Getenv("FAKEWORKER_EXIT_AFTER"))
	slowWait := 500 * time.Millisecond
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_SLOW_MS")); err == nil {
		slowWait = time.Duration(ms) * time.Millisecond
	}
	tagWait := 400 * time.Millisecond
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_TAG_MS")); err == nil {
		tagWait = time.Duration(ms) * time.Millisecond
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := os.Stdout
	for answered := 0; ; answered++ {
		if exitAfter > 0 && answered == exitAfter {
			return
		}
		line, err := in.ReadString('\n')
		if err != nil {
			if os.Getenv("FAKEWORKER_LINGER") != "" {
				time.Sleep(time.Hour)
			}
			return
		}
		line = strings.TrimSuffix(line, "\n")
		word, arg, _ := strings.Cut(line, " ")
		n, _ := strconv.Atoi(arg)
		switch word {
		case "hang": // never answer
			time.Sleep(time.Hour)
		case "hangterm": // never answer, ignore SIGTERM
			signal.Ignore(syscall.SIGTERM)
			time.Sleep(time.Hour)
		case "die": // exit without a reply
			os.Exit(3)
		case "partial": // half a line, then exit
			out.WriteString("part")
			os.Exit(0)
		case "garbage": // a reply line of control and 8-bit bytes
			out.Write([]byte("\x00\xff\x1b[0m garbage\r\x7f\n"))
		case "two": // two lines in one write
			out.WriteString("one\ntwo\n")
		case "twosep": // two lines in two writes
			out.WriteString("one\n")
			time.Sleep(100 * time.Millisecond)
			out.WriteString("two\n")
		case "long": // a reply line of n bytes before its newline
			out.WriteString(strings.Repeat("x", n) + "\n")
		case "flood": // n bytes on stderr, then an answer
			chunk := strings.Repeat("e", 1023) + "\n"
			for i := 0; i < n; i += len(chunk) {
				os.Stderr.WriteString(chunk)
			}
			out.WriteString("flooded\n")
		case "sleep": // answer after n milliseconds
			time.Sleep(time.Duration(n) * time.Millisecond)
			fmt.Fprintf(out, "slept %d\n", n)
		case "tag": // write the rest of the line (with %0A made newlines) on the -Z status pipe (fd 3), then answer after 400 ms (FAKEWORKER_TAG_MS)
			if st := os.NewFile(3, "status"); st != nil {
				_, _ = st.WriteString(strings.ReplaceAll(arg, "%0A", "\n") + "\n")
			}
			time.Sleep(tagWait)
			fmt.Fprintf(out, "tagged\n")
		case "tick": // record the tick in ticks.log (in the working directory), answer "tock n"
			if f, err := os.OpenFile("ticks.log", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666); err == nil {
				fmt.Fprintf(f, "%s\n", line)
				f.Close()
			}
			fmt.Fprintf(out, "tock %s\n", arg)
		case "alloc": // allocate and touch n MB, then answer
			b := make([]byte, n<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			fmt.Fprintf(out, "allocated %d\n", len(b)>>20)
		case "limits": // this process's address-space, data and RSS limits
			lim, _ := os.ReadFile("/proc/self/limits")
			var got []string
			for _, l := range strings.Split(string(lim), "\n") {
				if strings.HasPrefix(l, "Max address space") || strings.HasPrefix(l, "Max data size") || strings.HasPrefix(l, "Max resident set") {
					got = append(got, strings.Join(strings.Fields(l), " "))
				}
			}
			fmt.Fprintf(out, "%s\n", strings.Join(got, "|"))
		case "stderr": // the rest of the line on stderr (%0A made newlines), then an answer
			os.Stderr.WriteString(strings.ReplaceAll(arg, "%0A", "\n"))
			time.Sleep(100 * time.Millisecond)
			out.WriteString("said\n")
		case "pid":
			fmt.Fprintf(out, "pid %d\n", os.Getpid())
		case "args":
			fmt.Fprintf(out, "args %q\n", os.Args)
		case "map": // socket map: OK with the key reversed; map "nf" is NOTFOUND; see mapSpecial
			f := strings.SplitN(line, " ", 3)
			if len(f) == 3 && f[1] == "nf" {
				out.WriteString("NOTFOUND \n")
				break
			}
			if len(f) == 3 && mapSpecial(f[1], f[2]) {
				break
			}
			// The key is decoded, reversed and encoded again (a key with no
			// %XX is simply reversed).
			k := []rune(decode(f[len(f)-1]))
			for i, j := 0, len(k)-1; i < j; i, j = i+1, j-1 {
				k[i], k[j] = k[j], k[i]
			}
			fmt.Fprintf(out, "OK %s\n", encode(string(k)))
		case "relayok", "senderok", "recipok", "helook":
			if strings.Contains(line, "slow") {
				time.Sleep(slowWait)
			}
			out.WriteString("ok 1 ok 250 2.1.0 0\n")
		case "scan":
			if strings.Contains(line, "slow") {
				time.Sleep(slowWait)
			}
			out.WriteString("ok\n")
		default:
			fmt.Fprintf(out, "echo %q\n", line)
		}
	}
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
