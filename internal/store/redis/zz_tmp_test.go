package redis

import (
	"fmt"
	"strings"
	"testing"
)

func BenchmarkZZStats(b *testing.B) {
	srv := needServer(b)
	adm := admin(b, srv)
	info, _ := adm.Do(ctx, adm.B().Info().Section("commandstats").Build()).ToString()
	for l := range strings.Lines(info) {
		if strings.Contains(l, "eval") {
			fmt.Print(l)
		}
	}
	for range b.N {
	}
}
