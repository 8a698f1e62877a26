package main

import (
	"fmt"
	"image/color"

	"github.com/iosched/iosched/contrib/bench/internal/chart"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawComparison draws convergence time against the number of disks, one
// line per way, both axes logarithmic (the ways differ by two orders of
// magnitude), to an SVG and a PNG.
func drawComparison(c Comparison, svg, png string) error {
	p := plot.New()
	p.Title.Text = "Time until N loop devices that appeared at once have their scheduler"
	if c.Info["machine"] != "" {
		p.Title.Text += "\n" + c.Info["machine"]
	}
	p.X.Label.Text = "loop devices (log scale)"
	p.Y.Label.Text = "seconds to converge (log scale)"
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks(c.Sizes)
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(-8)
	p.Legend.TextStyle.Font.Size = vg.Points(9)

	colors := []color.Color{
		color.RGBA{120, 120, 120, 255}, // raw: grey, the floor
		color.RGBA{0, 114, 178, 255},   // iosched: blue
		color.RGBA{230, 159, 0, 255},   // udevd ATTR: orange
		color.RGBA{204, 121, 167, 255}, // udevd RUN: pink
		color.RGBA{213, 94, 0, 255},    // sequential: vermilion
		color.RGBA{0, 158, 115, 255},   // tuned: green
	}
	top := 0.0
	for _, s := range c.Series {
		for _, v := range s.Seconds {
			top = max(top, v)
		}
	}
	// Room above the highest line for the legend.
	p.Y.Max = top * 6
	for i, s := range c.Series {
		var pts plotter.XYs
		for j, v := range s.Seconds {
			if v > 0 {
				pts = append(pts, plotter.XY{X: float64(c.Sizes[j]), Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("series %s: %w", s.Key, err)
		}
		col := colors[i%len(colors)]
		line.Color = col
		line.Width = vg.Points(2)
		if s.Key == "raw" {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		if s.Key == "iosched" {
			line.Width = vg.Points(3)
		}
		points.Color = col
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3)
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: secondsLabels(pts)})
		if err != nil {
			return fmt.Errorf("series %s: %w", s.Key, err)
		}
		for j := range labels.TextStyle {
			labels.TextStyle[j].Color = col
			labels.TextStyle[j].Font.Size = vg.Points(8)
			labels.TextStyle[j].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{Y: vg.Points(5)}
		// Below their points: iosched's and the RUN rule's lines are
		// just above (labels above would overlap).
		if s.Key == "raw" || s.Key == "udevd_attr" {
			labels.Offset = vg.Point{Y: vg.Points(-13)}
		}
		p.Add(line, points, labels)
		p.Legend.Add(s.Label, line, points)
	}
	const w, h = 9 * vg.Inch, 5.5 * vg.Inch
	if err := p.Save(w, h, svg); err != nil {
		return fmt.Errorf("draw %s: %w", svg, err)
	}
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))
	p.Draw(draw.New(img))
	return chart.WritePNG(img, png)
}

// secondsLabels writes each point's time, in ms below a second.
func secondsLabels(pts plotter.XYs) []string {
	out := make([]string, len(pts))
	for i, p := range pts {
		if p.Y < 1 {
			out[i] = fmt.Sprintf("%.0f ms", p.Y*1000)
		} else {
			out[i] = fmt.Sprintf("%.1f s", p.Y)
		}
	}
	return out
}

// sizeTicks labels the x axis at the sizes measured.
func sizeTicks(sizes []int) plot.ConstantTicks {
	var t plot.ConstantTicks
	for _, n := range sizes {
		t = append(t, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	return t
}
