// Package events prints what a test consumer did as JSON lines on stdout, one object per
// line with its wall-clock time, so the Python side can order the events of several
// processes.
package events

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

var mu sync.Mutex

// Emit writes {"t": <unix seconds>, "event": name, ...fields} as one line.
func Emit(name string, fields map[string]any) {
	line := map[string]any{"t": float64(time.Now().UnixNano()) / 1e9, "event": name}
	for k, v := range fields {
		line[k] = v
	}
	b, err := json.Marshal(line)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "error", "error": err.Error()})
	}
	mu.Lock()
	defer mu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// Partitions is a topic's partitions, sorted, never nil (JSON [] rather than null).
func Partitions(m map[string][]int32, topic string) []int32 {
	ps := append(make([]int32, 0, len(m[topic])), m[topic]...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}
