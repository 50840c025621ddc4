package main

import (
	"math"
	"slices"
	"time"
)

// ms is a duration in milliseconds, as results.json holds them.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// quantile is the q-quantile (0..1) of ds by the nearest-rank method.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func maxOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

// Dist summarises durations, in milliseconds.
type Dist struct {
	N      int     `json:"n"`
	Median float64 `json:"median_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	Min    float64 `json:"min_ms"`
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	return Dist{N: len(ds), Median: ms(quantile(ds, 0.5)), P99: ms(quantile(ds, 0.99)), Max: ms(maxOf(ds)), Min: ms(slices.Min(ds))}
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }
