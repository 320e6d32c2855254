// Command banload plays the qmail article's scenario once against a
// running `sluice serve`: a relay on loopback that bans the sender for -t
// with a permanent 554 after more than -x sends in any -y, a qmail-remote
// stand-in that speaks SMTP to it, and qmail-send's queue: -messages
// queued at once, delivered -c at a time, each through `sluice throttle
// -qmail-remote`, the deferred ones retried on qmail-send's schedule
// (scaled by -retry-unit). It prints one line of figures: what reached
// qmail (delivered, bounced, deferred), what the relay saw (bans, refused
// MAILs, the most sends in any -y) and the time to empty the queue.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"sluice/internal/throttle/bantest"
)

func main() {
	sluice := flag.String("sluice", "sluice", "the sluice binary")
	standin := flag.String("qmail-remote", "", "bantest's qmail-remote stand-in (required)")
	sock := flag.String("socket", "", "the throttle socket of the running sluice (required)")
	label := flag.String("label", "run", "the run's name in the output")
	x := flag.Int("x", 100, "the relay allows this many sends in any -y")
	y := flag.Duration("y", 10*time.Second, "the relay's window")
	t := flag.Duration("t", 30*time.Second, "how long a ban lasts")
	messages := flag.Int("messages", 500, "messages queued at once (the list's subscribers)")
	conc := flag.Int("c", 10, "deliveries at once (qmail's concurrencyremote)")
	unit := flag.Duration("retry-unit", 2*time.Second, "qmail-send's retry schedule: (unit*n)² seconds after queueing (qmail: 20s)")
	limit := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	flag.Parse()
	if *standin == "" || *sock == "" {
		flag.Usage()
		os.Exit(2)
	}
	relay, err := bantest.StartRelay(bantest.RelayOptions{X: *x, Y: *y, T: *t})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer relay.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *limit)
	defer cancel()
	res := bantest.RunQueue(ctx, bantest.QueueOptions{
		Messages: *messages, Concurrency: *conc, RetryUnit: *unit,
		Deliver: func(ctx context.Context, i int) (int, []byte) {
			cmd := exec.CommandContext(ctx, *sluice, "throttle", "-qmail-remote", "-s", *sock, "--", *standin,
				"example.net", "list@example.org", fmt.Sprintf("subscriber%d@example.net", i))
			cmd.Env = append(os.Environ(), bantest.RelayEnv+"="+relay.Addr())
			return bantest.Run(cmd, "Subject: list mail\n\nhello\n")
		},
	})
	st := relay.Stats()
	dup := 0
	for _, n := range st.Recipient {
		dup += n - 1
	}
	fmt.Printf("%-8s messages=%d delivered=%d bounced=%d deferrals=%d relay_bans=%d relay_refused=%d duplicates=%d max_in_y=%d/%d took=%s",
		*label, *messages, res.Delivered, res.Bounced, res.Deferrals, st.Bans, st.Refused, dup, st.MaxInY, *x, res.Took.Round(100*time.Millisecond))
	if ctx.Err() != nil {
		fmt.Printf(" TIMED-OUT")
	}
	fmt.Println()
}
