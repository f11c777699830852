// saramaconsumer consumes one topic in a consumer group with IBM/sarama's ConsumerGroup and
// prints what it did as JSON lines (tests/go/internal/events): "assigned" when a claim's
// ConsumeClaim starts, "revoked" when it returns (after the commit of what it read),
// "record" with partition, offset and value, "committed", "closed" at the end. Offsets are
// marked per record and committed synchronously every 100 ms and when a claim ends, so a
// partition moves only after what was read from it is committed. SIGTERM closes the group
// cleanly (a dynamic member leaves; a static one, with -instance, does not).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"coord/tests/go/internal/events"
)

func strategy(name string) (sarama.BalanceStrategy, error) {
	switch name {
	case "range":
		return sarama.NewBalanceStrategyRange(), nil
	case "roundrobin":
		return sarama.NewBalanceStrategyRoundRobin(), nil
	case "sticky":
		return sarama.NewBalanceStrategySticky(), nil
	case "cooperative-sticky":
		return sarama.NewBalanceStrategyCooperativeSticky(), nil
	}
	return nil, fmt.Errorf("unknown strategy %q", name)
}

type handler struct {
	mu     sync.Mutex
	marked map[int32]int64 // the next offset to read, per partition, as marked
}

func (h *handler) Setup(sess sarama.ConsumerGroupSession) error {
	events.Emit("session", map[string]any{
		"member": sess.MemberID(), "generation": sess.GenerationID(), "claims": sess.Claims(),
	})
	return nil
}

func (h *handler) Cleanup(sess sarama.ConsumerGroupSession) error {
	h.commit(sess, "cleanup")
	events.Emit("session_end", map[string]any{"generation": sess.GenerationID()})
	return nil
}

// commit commits every marked offset (synchronously: Commit returns once the broker
// answered; its errors go to the group's Errors channel)
func (h *handler) commit(sess sarama.ConsumerGroupSession, why string) {
	sess.Commit()
	h.mu.Lock()
	offsets := map[string]int64{}
	for p, o := range h.marked {
		offsets[fmt.Sprint(p)] = o
	}
	h.mu.Unlock()
	events.Emit("committed", map[string]any{"offsets": offsets, "why": why})
}

func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := claim.Partition()
	events.Emit("assigned", map[string]any{
		"partitions": []int32{p}, "member": sess.MemberID(), "generation": sess.GenerationID(),
	})
	last := time.Now()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	dirty := false
loop:
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				break loop
			}
			events.Emit("record", map[string]any{
				"partition": msg.Partition, "offset": msg.Offset, "value": string(msg.Value),
			})
			sess.MarkMessage(msg, "")
			h.mu.Lock()
			h.marked[p] = msg.Offset + 1
			h.mu.Unlock()
			dirty = true
		case <-ticker.C:
		case <-sess.Context().Done():
			break loop
		}
		if dirty && time.Since(last) >= 100*time.Millisecond {
			h.commit(sess, "periodic")
			last, dirty = time.Now(), false
		}
	}
	h.commit(sess, "revoked")
	events.Emit("revoked", map[string]any{"partitions": []int32{p}})
	return nil
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	group := flag.String("group", "", "consumer group")
	topic := flag.String("topic", "", "topic to consume")
	name := flag.String("name", "saramaconsumer", "client id")
	instance := flag.String("instance", "", "group.instance.id (static membership) if set")
	strategyName := flag.String("balancer", "range", "range, roundrobin, sticky or cooperative-sticky")
	session := flag.Duration("session-timeout", 10*time.Second, "session timeout")
	heartbeat := flag.Duration("heartbeat-interval", 500*time.Millisecond, "heartbeat interval")
	flag.Parse()
	if *group == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "-group and -topic are required")
		os.Exit(2)
	}
	strat, err := strategy(*strategyName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = *name
	cfg.Version = sarama.V3_0_0_0 // static membership needs >= 2.3, cooperative >= 2.4
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strat}
	cfg.Consumer.Group.Session.Timeout = *session
	cfg.Consumer.Group.Heartbeat.Interval = *heartbeat
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	if *instance != "" {
		cfg.Consumer.Group.InstanceId = *instance
	}
	cg, err := sarama.NewConsumerGroup(strings.Split(*brokers, ","), *group, cfg)
	if err != nil {
		events.Emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
	events.Emit("started", map[string]any{"name": *name, "balancer": *strategyName})
	go func() {
		for err := range cg.Errors() {
			events.Emit("error", map[string]any{"error": err.Error()})
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h := &handler{marked: map[int32]int64{}}
	for ctx.Err() == nil {
		// an eager rebalance ends Consume: join again (bounded by the context)
		if err := cg.Consume(ctx, []string{*topic}, h); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			events.Emit("error", map[string]any{"error": err.Error()})
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := cg.Close(); err != nil {
		events.Emit("error", map[string]any{"error": err.Error()})
	}
	events.Emit("closed", nil)
}
