// Command fleetplot draws one hardware key of the fleet's view, as
// `iosched fleet --json` prints it: the share of busy time at each depth
// (bars, below) and each candidate scheduler's median probe curve with the
// machines' least and greatest (lines, above), on one log2 depth axis, so
// the depths the fleet runs at can be read against the curves there.
//
//	iosched fleet --prometheus URL --range 7d --json >fleet.json
//	go run ./cmd/fleetplot -json fleet.json -png fleet.png [-key SUBSTRING]
//
// Without -key it draws the key with the most machines.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/iosched/iosched/contrib/bench/internal/chart"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// report is the part of `iosched fleet --json` drawn (fleet.Report).
type report struct {
	Keys []key `json:"keys"`
}

type key struct {
	Key       string  `json:"key"`
	Machines  int     `json:"machines"`
	Disks     int     `json:"disks"`
	BusyHours float64 `json:"busy_hours"`
	Depths    []struct {
		Le    string  `json:"le"`
		Share float64 `json:"share"`
	} `json:"depths"`
	Curves []struct {
		Scheduler string `json:"scheduler"`
		Points    []struct {
			Depth    int     `json:"depth"`
			Median   float64 `json:"median"`
			Min      float64 `json:"min"`
			Max      float64 `json:"max"`
			Machines int     `json:"machines"`
		} `json:"points"`
	} `json:"curves"`
	Kernel   string `json:"kernel"`
	Verdicts []struct {
		Scheduler string  `json:"scheduler"`
		Change    float64 `json:"change"`
		Low       float64 `json:"low"`
		High      float64 `json:"high"`
		Machines  int     `json:"machines"`
	} `json:"verdicts"`
	Note string `json:"note"`
}

func main() {
	in := flag.String("json", "", "`iosched fleet --json`'s output")
	out := flag.String("png", "", "the PNG to write")
	which := flag.String("key", "", "draw the key containing this (default: the one with the most machines)")
	title := flag.String("title", "", "a second title line (the fleet, the run)")
	flag.Parse()
	if *in == "" || *out == "" {
		log.Fatal("usage: fleetplot -json FILE -png FILE [-key SUBSTRING] [-title TEXT]")
	}
	k, err := readKey(*in, *which)
	if err != nil {
		log.Fatal(err)
	}
	if err := draw1(k, *out, *title); err != nil {
		log.Fatal(err)
	}
}

// readKey reads the report and picks the key to draw.
func readKey(path, which string) (*key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var best *key
	for i := range r.Keys {
		k := &r.Keys[i]
		switch {
		case which != "" && strings.Contains(k.Key, which):
			return k, nil
		case which == "" && (best == nil || k.Machines > best.Machines):
			best = k
		}
	}
	if best == nil {
		if which != "" {
			return nil, fmt.Errorf("%s: no key contains %q", path, which)
		}
		return nil, fmt.Errorf("%s: no key", path)
	}
	return best, nil
}

var (
	barColor = color.RGBA{86, 180, 233, 255} // sky blue
	grey     = color.RGBA{120, 120, 120, 255}
	colors   = map[string]color.Color{
		"none":        color.RGBA{0, 158, 115, 255}, // green
		"mq-deadline": color.RGBA{230, 159, 0, 255}, // orange
		"kyber":       color.RGBA{204, 121, 167, 255},
		"bfq":         color.RGBA{213, 94, 0, 255},
	}
)

// bucket is one depth bucket's span on the depth axis: (lo, le], the
// first drawn from half its bound, the last (+Inf) as wide as the one
// before it.
type bucket struct {
	lo, hi float64
	label  string
	share  float64
}

func buckets(k *key) ([]bucket, error) {
	var out []bucket
	prev := 0.0
	for i, d := range k.Depths {
		le, err := strconv.ParseFloat(d.Le, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: depth bucket %d: le %q", k.Key, i+1, d.Le)
		}
		b := bucket{lo: prev, hi: le, share: d.Share, label: fmt.Sprintf("(%g, %g]", prev, le)}
		switch {
		case i == 0:
			b.lo, b.label = le/2, fmt.Sprintf("≤ %g", le)
		case math.IsInf(le, 1):
			b.hi, b.label = prev*2, fmt.Sprintf("> %g", prev)
		}
		out = append(out, b)
		prev = le
	}
	return out, nil
}

// iops is a rate as the fleet's table prints one: 1.2K, 250K, 1.5M.
func iops(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "K"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func draw1(k *key, png, subtitle string) error {
	bs, err := buckets(k)
	if err != nil {
		return err
	}
	if len(bs) == 0 && len(k.Curves) == 0 {
		return fmt.Errorf("%s: no busy time and no curves to draw", k.Key)
	}
	// The depth axis: from the first bucket, or the first probe depth,
	// to past the last bucket with busy time and the deepest probe depth.
	xmin, xmax := 0.5, 2.0
	for _, b := range bs {
		if b.share > 0 {
			xmax = max(xmax, b.hi)
		}
	}
	for _, c := range k.Curves {
		for _, p := range c.Points {
			xmax = max(xmax, 2*float64(p.Depth))
		}
	}
	var ticks []plot.Tick
	for d := 1.0; d <= xmax; d *= 2 {
		ticks = append(ticks, plot.Tick{Value: d, Label: strconv.FormatFloat(d, 'g', -1, 64)})
	}
	axis := func(p *plot.Plot) {
		p.X.Scale = plot.LogScale{}
		p.X.Min, p.X.Max = xmin, xmax
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Add(plotter.NewGrid())
	}

	top := plot.New()
	top.Title.Text = fmt.Sprintf("iosched fleet: %s\n%d machines, %d disks, %.2f busy hours", k.Key, k.Machines, k.Disks, k.BusyHours)
	if subtitle != "" {
		top.Title.Text += "; " + subtitle
	}
	top.Y.Label.Text = "IOPS (probe curve: median, bars min-max)"
	axis(top)
	top.X.Tick.Label.Color = color.Transparent
	top.Legend.Top = true
	top.Legend.Left = true
	top.Legend.TextStyle.Font.Size = vg.Points(9)
	ymax := 0.0
	for _, c := range k.Curves {
		col, ok := colors[c.Scheduler]
		if !ok {
			col = grey
		}
		var med plotter.XYs
		var errs plotter.YErrors
		for _, p := range c.Points {
			med = append(med, plotter.XY{X: float64(p.Depth), Y: p.Median})
			errs = append(errs, struct{ Low, High float64 }{p.Median - p.Min, p.Max - p.Median})
			ymax = max(ymax, p.Max)
		}
		if len(med) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(med)
		if err != nil {
			return err
		}
		line.Color, line.Width = col, vg.Points(2)
		points.Color, points.Shape = col, draw.CircleGlyph{}
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{med, errs})
		if err != nil {
			return err
		}
		eb.Color = col
		top.Add(line, points, eb)
		label := c.Scheduler
		if c.Scheduler == k.Kernel {
			label += " (the kernel's choice)"
		}
		for _, v := range k.Verdicts {
			if v.Scheduler == c.Scheduler {
				label += fmt.Sprintf(": %+.0f%% at the fleet's depths", 100*v.Change)
			}
		}
		top.Legend.Add(label, line, points)
	}
	top.Y.Min, top.Y.Max = 0, ymax*1.15
	top.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ts := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ts {
			if ts[i].Label != "" {
				ts[i].Label = iops(ts[i].Value)
			}
		}
		return ts
	})

	bottom := plot.New()
	bottom.X.Label.Text = "requests in flight (log2); bars: the depth buckets of busy time"
	bottom.Y.Label.Text = "share of busy time"
	axis(bottom)
	bottom.Y.Min, bottom.Y.Max = 0, 1
	var at plotter.XYs
	var texts []string
	for _, b := range bs {
		if b.share <= 0 {
			continue
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: b.lo, Y: 0}, {X: b.hi, Y: 0}, {X: b.hi, Y: b.share}, {X: b.lo, Y: b.share}})
		if err != nil {
			return err
		}
		poly.Color = barColor
		poly.LineStyle.Color = color.White
		bottom.Add(poly)
		at = append(at, plotter.XY{X: math.Sqrt(b.lo * b.hi), Y: b.share})
		texts = append(texts, fmt.Sprintf("%.0f%% %s", 100*b.share, b.label))
	}
	if len(at) > 0 {
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: texts})
		if err != nil {
			return err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Font.Size = vg.Points(8)
			labels.TextStyle[i].XAlign = draw.XCenter
			labels.Offset.Y = vg.Points(3)
		}
		bottom.Add(labels)
	}
	if len(at) == 0 {
		bottom.Title.Text = "no busy time observed: " + k.Note
	}

	const w, h = 9 * vg.Inch, 7 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(120))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(4), PadY: vg.Points(4), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return chart.WritePNG(img, png)
}
