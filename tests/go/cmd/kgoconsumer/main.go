// kgoconsumer consumes one topic in a consumer group with franz-go (kgo) and prints what it
// did as JSON lines (tests/go/internal/events): "assigned", "revoked" and "lost" with the
// partitions, "record" with partition, offset and value, "committed" with the offsets and
// the error, "closed" at the end. Offsets are committed after each poll and in
// OnPartitionsRevoked, with BlockRebalanceOnPoll, so a partition moves only after what was
// read from it is committed. SIGTERM closes the client cleanly (a dynamic member leaves the
// group; a static one, with -instance, does not).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"coord/tests/go/internal/events"
)

func balancer(name string) (kgo.GroupBalancer, error) {
	switch name {
	case "range":
		return kgo.RangeBalancer(), nil
	case "roundrobin":
		return kgo.RoundRobinBalancer(), nil
	case "sticky":
		return kgo.StickyBalancer(), nil
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer(), nil
	}
	return nil, fmt.Errorf("unknown balancer %q", name)
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	group := flag.String("group", "", "consumer group")
	topic := flag.String("topic", "", "topic to consume")
	name := flag.String("name", "kgoconsumer", "client id")
	instance := flag.String("instance", "", "group.instance.id (static membership) if set")
	balancerName := flag.String("balancer", "range", "range, roundrobin, sticky or cooperative-sticky")
	session := flag.Duration("session-timeout", 10*time.Second, "session timeout")
	heartbeat := flag.Duration("heartbeat-interval", 500*time.Millisecond, "heartbeat interval")
	flag.Parse()
	if *group == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "-group and -topic are required")
		os.Exit(2)
	}
	bal, err := balancer(*balancerName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	// commits what was read and not yet committed, and says so (the offsets and the error)
	commit := func(ctx context.Context, cl *kgo.Client, why string) {
		pending := cl.UncommittedOffsets()
		if len(pending) == 0 {
			return
		}
		offsets := map[string]int64{}
		for _, ps := range pending {
			for p, eo := range ps {
				offsets[fmt.Sprint(p)] = eo.Offset
			}
		}
		err := cl.CommitUncommittedOffsets(ctx)
		fields := map[string]any{"offsets": offsets, "why": why, "error": nil}
		if err != nil {
			fields["error"] = err.Error()
		}
		events.Emit("committed", fields)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID(*name),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.Balancers(bal),
		kgo.SessionTimeout(*session),
		kgo.HeartbeatInterval(*heartbeat),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			member, gen := cl.GroupMetadata()
			events.Emit("assigned", map[string]any{
				"partitions": events.Partitions(m, *topic), "member": member, "generation": gen,
			})
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			commit(ctx, cl, "revoked")
			events.Emit("revoked", map[string]any{"partitions": events.Partitions(m, *topic)})
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			events.Emit("lost", map[string]any{"partitions": events.Partitions(m, *topic)})
		}),
	}
	if *instance != "" {
		opts = append(opts, kgo.InstanceID(*instance))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		events.Emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
	events.Emit("started", map[string]any{"name": *name, "balancer": *balancerName})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, 1000)
		fetches.EachError(func(t string, p int32, err error) {
			if ctx.Err() == nil {
				events.Emit("error", map[string]any{"topic": t, "partition": p, "error": err.Error()})
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			events.Emit("record", map[string]any{
				"partition": r.Partition, "offset": r.Offset, "value": string(r.Value),
			})
		})
		// commit before the next rebalance may run (uses a fresh context: a SIGTERM after
		// the poll still commits what was read)
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		commit(cctx, cl, "poll")
		cancel()
		cl.AllowRebalance()
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	commit(cctx, cl, "close")
	cancel()
	cl.Close()
	events.Emit("closed", nil)
}
