package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/conncount"
)

var (
	growthListeners = []int{10, 1000, 10000}
	growthHeld      = 10  // connections held open while measuring
	growthIters     = 200 // drain polls and /ready calls per listener count

	// growthStatsRoundsLarge is how many stats counts are timed at 10,000
	// listeners (each takes seconds); growthIters below that.
	growthStatsRoundsLarge = 5
)

// drainPollPath is the query the agent's drain poll made until it counted
// from the kernel alone; now its fallback when /proc is unreadable.
const drainPollPath = `/stats?filter=^listener\..*downstream_cx_active$`

// scenarioGrowth is scenario 5: what one drain poll (the kernel's count,
// conncount.Counter, and a full count with nothing remembered), the stats query with adminapi.ParseActiveConnections
// (the poll's fallback, and once half the poll) and one GET
// /ready cost with 10, 1,000 and 10,000 listeners. Every listener has had a connection, so that every gauge
// is "used" and shows up in the answer; growthHeld stay open.
func (b *bench) scenarioGrowth(ctx context.Context) (*GrowthResult, error) {
	r := &GrowthResult{Iterations: growthIters}
	for _, n := range growthListeners {
		row, err := b.growthOne(ctx, n)
		if err != nil {
			return r, fmt.Errorf("%d listeners: %w", n, err)
		}
		r.Rows = append(r.Rows, *row)
	}
	return r, nil
}

func (b *bench) growthOne(ctx context.Context, n int) (*GrowthRow, error) {
	s, p, err := b.setupEnvoy(fmt.Sprintf("growth-%d", n), fmt.Sprintf("growth-envoy-%d", n), "growth", n)
	if err != nil {
		return nil, err
	}
	admin, listeners := s.admin, s.listeners
	defer func() { _ = p.stop(context.WithoutCancel(ctx), 10*time.Second) }()
	readyAt, err := pollReady(ctx, p, admin, 5*time.Millisecond, 90*time.Second+time.Duration(n)*20*time.Millisecond) // 10,000 listeners: minutes on a loaded machine
	if err != nil {
		return nil, err
	}
	row := &GrowthRow{Listeners: n, StartMs: ms(readyAt.Sub(p.Started())), Held: min(growthHeld, n)}

	// One connection to every listener, then hold growthHeld of them.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: time.Second}
	for i, port := range listeners {
		c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return nil, fmt.Errorf("connect to listener %d: %w", i, err)
		}
		if i < row.Held {
			held = append(held, c)
		} else {
			// Reset, not closed: a close leaves a TIME_WAIT socket for 60 s, and
			// 10,000 of them would make every drain poll walk them (a poll's cost
			// follows the connections, recently closed ones too, not the
			// listeners; that is what this scenario measures).
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}
	admc := adminapi.New("127.0.0.1", admin)
	// Envoy counts a connection once its worker accepted it: wait for all.
	for i := 0; i < 200; i++ {
		got, err := admc.ActiveConnections(ctx)
		k, kerr := conncount.New(nil).Count([]int{p.Pid()}, admin)
		if err == nil && got == row.Held && kerr == nil && k == row.Held {
			break
		}
		sleep(ctx, 10*time.Millisecond)
	}

	// Envoy renders the stats query in seconds at 10,000 listeners: a few
	// rounds of it there, with time to answer.
	statsRounds, c := growthIters, oneShot(5*time.Second)
	if n >= 10000 {
		statsRounds, c = growthStatsRoundsLarge, oneShot(2*time.Minute)
	}
	row.StatsRounds = statsRounds
	var gets, parses, polls, readies, kernels, fulls []time.Duration
	pid := p.Pid()
	counter := conncount.New(nil) // the drain poll's, kept across the rounds
	for i := 0; i < growthIters && ctx.Err() == nil; i++ {
		t2 := time.Now()
		if i < statsRounds {
			t0 := time.Now()
			code, body, err := get(ctx, c, localURL(admin, drainPollPath))
			t1 := time.Now()
			if err != nil || code != http.StatusOK {
				return nil, fmt.Errorf("stats count: status %d, %v", code, err)
			}
			got, err := adminapi.ParseActiveConnections(body)
			t2 = time.Now()
			if err != nil {
				return nil, fmt.Errorf("parse the stats count: %w", err)
			}
			gets, parses, polls = append(gets, t1.Sub(t0)), append(parses, t2.Sub(t1)), append(polls, t2.Sub(t0))
			if i == 0 {
				row.StatsBytes, row.Parsed = len(body), got
				row.StatsLines = strings.Count(string(body), "\n")
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rd, err := admc.Ready(rctx)
		t3 := time.Now()
		cancel()
		if err != nil || !rd.Live {
			return nil, fmt.Errorf("GET /ready: %+v, %v", rd, err)
		}
		n, err := counter.Count([]int{pid}, admin)
		t4 := time.Now()
		if err != nil || n != row.Held {
			return nil, fmt.Errorf("the kernel's count: %d, %v; want %d", n, err, row.Held)
		}
		n, err = conncount.New(nil).Count([]int{pid}, admin)
		t5 := time.Now()
		if err != nil || n != row.Held {
			return nil, fmt.Errorf("a full count: %d, %v; want %d", n, err, row.Held)
		}
		readies, kernels, fulls = append(readies, t3.Sub(t2)), append(kernels, t4.Sub(t3)), append(fulls, t5.Sub(t4))
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("cut short: %w", ctx.Err())
	}
	row.Get, row.Parse, row.Poll, row.Ready, row.Kernel = dist(gets), dist(parses), dist(polls), dist(readies), dist(kernels)
	row.FullCount, row.PollFull = dist(fulls), counter.FullCounts()
	b.logf("growth: %d listeners: LIVE after %.0fms, drain poll (kernel) median %.2fms (%d of %d full), full count median %.2fms, stats query median %.2fms (%d bytes, %d connections), /ready median %.2fms",
		n, row.StartMs, row.Kernel.Median, row.PollFull, len(kernels), row.FullCount.Median, row.Poll.Median, row.StatsBytes, row.Parsed, row.Ready.Median)
	return row, nil
}
