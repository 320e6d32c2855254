package main

import (
	"fmt"
	"hash/crc32"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// out is where answers go.
var out = os.Stdout

// handle acts on one command line by its first word; a word no group
// knows is echoed back.
func handle(c config, line string) {
	word, arg, _ := strings.Cut(line, " ")
	n, _ := strconv.Atoi(arg)
	switch {
	case misbehave(word, n):
	case timed(c, word, arg, n):
	case probe(word, line, arg, n):
	case word == "map":
		socketMap(line)
	case mail(c, word, line):
	default:
		fmt.Fprintf(out, "echo %q\n", line)
	}
}

// misbehave acts out the broken workers: no answer, an exit, replies of
// odd shapes or sizes. It reports whether word was one of them.
func misbehave(word string, n int) bool {
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
	case "twosep": // two lines in two writes, then "twosep: two written" on stderr
		out.WriteString("one\n")
		time.Sleep(100 * time.Millisecond)
		out.WriteString("two\n")
		os.Stderr.WriteString("twosep: two written\n")
	case "long": // a reply line of n bytes before its newline
		out.WriteString(strings.Repeat("x", n) + "\n")
	case "flood": // n bytes on stderr, then an answer
		chunk := strings.Repeat("e", 1023) + "\n"
		for i := 0; i < n; i += len(chunk) {
			os.Stderr.WriteString(chunk)
		}
		out.WriteString("flooded\n")
	default:
		return false
	}
	return true
}

// timed acts out the requests that take a set time. It reports whether
// word was one of them.
func timed(c config, word, arg string, n int) bool {
	switch word {
	case "sleep": // answer after n milliseconds
		time.Sleep(time.Duration(n) * time.Millisecond)
		fmt.Fprintf(out, "slept %d\n", n)
	case "tag": // write the rest of the line (with %0A made newlines) on the -Z status pipe (fd 3), then answer after 400 ms (FAKEWORKER_TAG_MS)
		if st := os.NewFile(3, "status"); st != nil {
			_, _ = st.WriteString(strings.ReplaceAll(arg, "%0A", "\n") + "\n")
		}
		time.Sleep(c.tagWait)
		fmt.Fprintf(out, "tagged\n")
	case "stderr": // the rest of the line on stderr (%0A made newlines), then an answer 100 ms later
		os.Stderr.WriteString(strings.ReplaceAll(arg, "%0A", "\n"))
		time.Sleep(100 * time.Millisecond)
		out.WriteString("said\n")
	default:
		return false
	}
	return true
}

// probe answers with facts about this process: what the multiplexor gave
// it (arguments, limits, working directory) and what it can do. It
// reports whether word was one of them.
func probe(word, line, arg string, n int) bool {
	switch word {
	case "len": // the line's length and CRC-32
		fmt.Fprintf(out, "len %d %08x\n", len(line), crc32.ChecksumIEEE([]byte(line)))
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
	case "pid":
		fmt.Fprintf(out, "pid %d\n", os.Getpid())
	case "args":
		fmt.Fprintf(out, "args %q\n", os.Args)
	default:
		return false
	}
	return true
}

// mail answers the mail commands (relayok, senderok, recipok, helook,
// scan) with success, after FAKEWORKER_SLOW_MS when the line says
// "slow". It reports whether word was one of them.
func mail(c config, word, line string) bool {
	var reply string
	switch word {
	case "relayok", "senderok", "recipok", "helook":
		reply = "ok 1 ok 250 2.1.0 0\n"
	case "scan":
		reply = "ok\n"
	default:
		return false
	}
	if strings.Contains(line, "slow") {
		time.Sleep(c.slowWait)
	}
	out.WriteString(reply)
	return true
}
