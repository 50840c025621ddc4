package main

import (
	"math"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// ms is a duration in milliseconds, as results.json holds them.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// msAll is each of ds in milliseconds (nil for none), as results.json holds them.
func msAll(ds []time.Duration) []float64 {
	var xs []float64
	for _, d := range ds {
		xs = append(xs, ms(d))
	}
	return xs
}

// Dist summarises durations, in milliseconds.
type Dist struct {
	N      int     `json:"n"`
	Median float64 `json:"median_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	Min    float64 `json:"min_ms"`
}

// dist summarises ds; its quantiles are gonum's empirical ones (the nearest
// rank: a value that was measured, never an interpolation).
func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	slices.Sort(xs)
	q := func(p float64) float64 { return ms(time.Duration(stat.Quantile(p, stat.Empirical, xs, nil))) }
	return Dist{N: len(ds), Median: q(0.5), P99: q(0.99), Max: ms(time.Duration(xs[len(xs)-1])), Min: ms(time.Duration(xs[0]))}
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }
