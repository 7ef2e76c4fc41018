package main

// The floor under chatbench group: processes that read the same events
// from JetStream as chatpulse does, with nats.go's ordered consumers, and
// only count them. What they cost is what NATS delivery alone costs each
// process, before chatpulse does anything with a message.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/bus"
)

// bareFloor feeds evs, paced as chatpulse's were, to bare consumers: one
// process with one consumer of every event, as a standalone instance
// reads them, then members with one consumer per stage of each partition,
// as a group's members read them (partition p is member p mod members').
// It prints each one's CPU against the single process's.
//
// One consumer per stage holding all of a member's filters would be
// fewer, but in nats-server v2.15.2 two consumers of more than one filter
// subject on one stream, read while events are published, can stop
// delivering with messages pending (and such consumers skip some when
// started by time), so chatpulse has one filter per consumer, and so has
// this floor.
func bareFloor(url string, node func(int) string, replicas int, evs []benchEvent, rate float64, members, partitions int) error {
	nc, js, err := connectJS(url, "chatbench-bare")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dest, err := bus.PartitionTransform("bgrp.>", partitions)
	if err != nil {
		return err
	}
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "BARE_SOLO", Subjects: []string{"bsolo.>"}, Replicas: replicas},
		{Name: "BARE_GROUP", Subjects: []string{"bgrp.>"}, Replicas: replicas, SubjectTransform: &jetstream.SubjectTransformConfig{Source: src, Destination: dest}},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	var got, want int64 // of the last run, as last counted
	var each []int64
	all := func(ps []*bareProcess) func() (bool, error) {
		want = int64(len(evs)) * int64(ps[0].stages)
		return func() (bool, error) {
			got, each = 0, each[:0]
			for _, p := range ps {
				n, err := p.count()
				if err != nil {
					return false, err
				}
				got += n
				each = append(each, n)
			}
			return got == want, nil
		}
	}
	run := func(prefix string, ps []*bareProcess) ([]usage, error) {
		defer func() {
			for _, p := range ps {
				p.stop()
			}
		}()
		var ids []int
		for _, p := range ps {
			ids = append(ids, p.pid)
		}
		use, _, err := feed(url, prefix, evs, rate, ids, all(ps))
		if err != nil {
			return nil, fmt.Errorf("bare consumers of %s: %w (%d deliveries of %d: %v)", prefix, err, got, want, each)
		}
		return use, nil
	}

	solo, err := startBareFeed(node(-1), "BARE_SOLO", []string{"bsolo.>"})
	if err != nil {
		return err
	}
	soloUse, err := run("bsolo", []*bareProcess{solo})
	if err != nil {
		return err
	}
	soloCPU := soloUse[0].cpu
	fmt.Printf("bare consumers, counting what NATS delivers: one process, one consumer: %.2f µs CPU/event, %.2f wake-ups/event\n",
		perEvent(soloCPU, len(evs)), soloUse[0].perEvent(len(evs)))
	var ps []*bareProcess
	for i := range members {
		var filters []string
		for p := i; p < partitions; p += members {
			filters = append(filters, bus.RoomPartition(p), bus.UserPartition(p))
		}
		p, err := startBareFeed(node(i), "BARE_GROUP", filters)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	use, err := run("bgrp", ps)
	if err != nil {
		return err
	}
	total, busiest := 0.0, 0.0
	var shares []string
	for _, u := range use {
		total += u.cpu
		busiest = max(busiest, u.cpu)
		shares = append(shares, fmt.Sprintf("%.2f", perEvent(u.cpu, len(evs))))
	}
	fmt.Printf("bare members, a consumer per stage of each partition: %s µs CPU/event; %.2fx the one process in all, busiest %.2fx\n",
		strings.Join(shares, ", "), total/soloCPU, busiest/soloCPU)
	fmt.Println()
	return nil
}

// startBareFeed starts a `chatbench bare-feed` child on stream's filters.
func startBareFeed(url, stream string, filters []string) (*bareProcess, error) {
	p, err := startCounting(append([]string{"bare-feed", url, stream}, filters...)...)
	if err != nil {
		return nil, err
	}
	p.stages = 1
	if strings.HasPrefix(filters[0], bus.PartitionPrefix) {
		p.stages = 2 // every event is one room partition's and one user partition's
	}
	return p, nil
}

// bareFeedCmd reads a stream's new messages with ordered consumers, one
// per filter subject, as chatpulse's feeds do (the same pull settings),
// and counts them. Each line on stdin asks it for the count so far.
func bareFeedCmd(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: chatbench bare-feed URL STREAM FILTER...")
	}
	nc, js, err := connectJS(args[0], "chatbench-bare-feed")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n atomic.Int64
	for _, filter := range args[2:] {
		cons, err := js.OrderedConsumer(ctx, args[1], jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			return err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			m.Metadata()
			n.Add(1)
		}, jetstream.PullMaxMessages(4096))
		if err != nil {
			return err
		}
		defer cc.Stop()
	}
	return answerCounts(n.Load)
}

// connectJS connects to url under name, with JetStream.
func connectJS(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
