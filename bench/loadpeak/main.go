// Command loadpeak loads a policy (a file or a directory) as toolgate serve
// does at start, under its GC targets (400, and 25 while the policy
// compiles), in a process of its own, and prints the load's peaks above the
// heap before: the heap's objects (garbage not yet collected included), the
// live heap as each collection found it, and the anonymous RSS (RssAnon,
// without the binary's pages; sampled, the kernel keeps no peak of it),
// against the live heap once loaded. TIMELINE=1 prints them every 100 ms
// to stderr as well. bench/RESULTS.md says how its figures were taken.
//
//	go run ./bench/loadpeak <policy>
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/config"
)

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func status(key string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(l, key+":"))
		}
	}
	return ""
}

func main() {
	debug.SetGCPercent(400)
	before := liveHeap()
	t0 := time.Now()
	last := t0
	var top, topLive, topAnon atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		for i := 0; ; i++ {
			metrics.Read(s)
			top.Store(max(top.Load(), s[0].Value.Uint64()))
			topLive.Store(max(topLive.Load(), s[1].Value.Uint64()))
			if os.Getenv("TIMELINE") != "" && time.Since(last) > 100*time.Millisecond {
				last = time.Now()
				fmt.Fprintf(os.Stderr, "%6dms heap %5.1f live %5.1f anon %s\n", time.Since(t0).Milliseconds(), float64(s[0].Value.Uint64())/(1<<20), float64(s[1].Value.Uint64())/(1<<20), status("RssAnon"))
			}
			if i%20 == 0 {
				var kb uint64
				fmt.Sscanf(status("RssAnon"), "%d", &kb)
				topAnon.Store(max(topAnon.Load(), kb))
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	start := time.Now()
	snap, err := config.NewLoader(os.Args[1], config.LoaderOptions{Settle: time.Nanosecond, GCPercent: 25}).Load()
	el := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	after := liveHeap()
	debug.FreeOSMemory()
	runtime.KeepAlive(snap)
	mib := func(b uint64) float64 { return float64(b-min(before, b)) / (1 << 20) }
	live := mib(after)
	fmt.Printf("load %v; live after %.1f MiB; peak live %.1f (%.2fx); peak heap %.1f (%.2fx); VmHWM %s; peak RssAnon %.1f MiB; RssAnon after %s\n",
		el.Round(time.Millisecond), live, mib(topLive.Load()), mib(topLive.Load())/live, mib(top.Load()), mib(top.Load())/live,
		status("VmHWM"), float64(topAnon.Load())/1024, status("RssAnon"))
}
