package main

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	okColor     = color.RGBA{R: 0x2e, G: 0x9e, B: 0x44, A: 0xff}
	failedColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	changeColor = color.RGBA{R: 0x3a, G: 0x6f, B: 0xc4, A: 0xff}
	badColor    = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
)

// renderReloadSVG draws scenario 2 with gonum/plot: requests that succeeded
// and failed per time slice, by send time, the agent above the baseline,
// with each config change marked from its start to its end.
func renderReloadSVG(r *ReloadResult) string {
	if r == nil {
		p := plot.New()
		p.Title.Text = "Reload under load: not run"
		return svgOf([][]*plot.Plot{{p}}, 10*vg.Inch, 2*vg.Inch)
	}
	sides := []struct {
		title string
		s     ReloadSide
	}{{"Agent: " + r.Agent.Method, r.Agent}, {"Baseline: " + r.Baseline.Method, r.Baseline}}
	var maxN float64 = 1
	for _, side := range sides {
		for _, bk := range side.s.Buckets {
			maxN = max(maxN, float64(bk.OK+bk.Failed))
		}
	}
	rows := make([][]*plot.Plot, 0, len(sides))
	for _, side := range sides {
		rows = append(rows, []*plot.Plot{reloadPanel(side.title, side.s, r.BucketMs, maxN)})
	}
	return svgOf(rows, 10*vg.Inch, 7*vg.Inch)
}

// reloadPanel is one side's plot.
func reloadPanel(title string, s ReloadSide, bucketMs int, maxN float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d sent, %d failed, %d/%d changes worked", title, s.Load.Sent, s.Load.Failed, s.ChangesOK, s.Changes)
	p.X.Label.Text = "seconds since the load began"
	p.Y.Label.Text = fmt.Sprintf("requests per %d ms", bucketMs)
	p.Y.Min, p.Y.Max = 0, maxN*1.45 // headroom for the legend above the bars
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Millimeter * 4
	if s.NotAvailable != "" {
		p.Title.Text = title + ": " + s.NotAvailable
		return p
	}
	ok, failed := make(plotter.XYs, len(s.Buckets)), make(plotter.XYs, len(s.Buckets))
	for i, bk := range s.Buckets {
		t := float64(i*bucketMs) / 1000
		ok[i], failed[i] = plotter.XY{X: t, Y: float64(bk.OK)}, plotter.XY{X: t, Y: float64(bk.Failed)}
	}
	addLine(p, "succeeded", ok, okColor)
	addLine(p, "failed", failed, failedColor)
	for i, ev := range s.Events {
		c, name := changeColor, ""
		if !ev.OK {
			c = badColor
		}
		if i == 0 {
			name = "config change (start to end)"
		}
		span := plotter.XYs{{X: ev.StartMs / 1000, Y: maxN * 1.05}, {X: max(ev.EndMs, ev.StartMs+1) / 1000, Y: maxN * 1.05}}
		start := plotter.XYs{{X: ev.StartMs / 1000, Y: 0}, {X: ev.StartMs / 1000, Y: maxN * 1.05}}
		addLine(p, name, span, c)
		l := addLine(p, "", start, c)
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	}
	return p
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color) *plotter.Line {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return &plotter.Line{}
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return l
}

// svgOf lays the plots out in rows on one SVG canvas.
func svgOf(rows [][]*plot.Plot, w, h vg.Length) string {
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(rows), Cols: len(rows[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j, p := range rows[i] {
			p.Draw(canvases[i][j])
		}
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return ""
	}
	return b.String()
}
