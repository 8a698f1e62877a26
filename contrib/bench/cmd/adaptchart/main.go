// Command adaptchart draws a run of the daemon's phased adaptive test
// (daemon.TestIntegrationAdaptPhased, with IOSCHED_PHASED_CSV=FILE): time on
// the x axis, the depth the test drove and the busy depth the disk counted
// on the y axis (log scale), and the scheduler the daemon chose as a band
// above them, each switch marked.
//
//	go run ./cmd/adaptchart -csv results/adaptive-T.csv -png results/adaptive-T.png
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"log"
	"math"
	"os"
	"strconv"

	"github.com/iosched/iosched/contrib/bench/internal/chart"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// row is one sample of the CSV.
type row struct {
	t          float64
	phase      string
	driven     int
	busyDepth  float64
	scheduler  string
	switchedTo string // "from->to" on a switch, else ""
}

func main() {
	in := flag.String("csv", "", "the phased test's CSV (IOSCHED_PHASED_CSV)")
	out := flag.String("png", "", "the PNG to write")
	title := flag.String("title", "", "a second title line (the machine, the run)")
	flag.Parse()
	if *in == "" || *out == "" {
		log.Fatal("usage: adaptchart -csv FILE -png FILE [-title TEXT]")
	}
	rows, err := readCSV(*in)
	if err != nil {
		log.Fatal(err)
	}
	if err := draw1(rows, *out, *title); err != nil {
		log.Fatal(err)
	}
}

func readCSV(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	want := []string{"t_s", "phase", "driven_depth", "busy_depth", "busy", "scheduler", "switch"}
	if len(head) != len(want) {
		return nil, fmt.Errorf("%s: columns %v, want %v", path, head, want)
	}
	var rows []row
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		t, err1 := strconv.ParseFloat(rec[0], 64)
		driven, err2 := strconv.Atoi(rec[2])
		depth, err3 := strconv.ParseFloat(rec[3], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		rows = append(rows, row{t: t, phase: rec[1], driven: driven, busyDepth: depth, scheduler: rec[5], switchedTo: rec[6]})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return rows, nil
}

var (
	blue   = color.RGBA{0, 114, 178, 255}
	grey   = color.RGBA{120, 120, 120, 255}
	colors = map[string]color.Color{
		"none":        color.RGBA{0, 158, 115, 255}, // green
		"mq-deadline": color.RGBA{230, 159, 0, 255}, // orange
		"kyber":       color.RGBA{204, 121, 167, 255},
		"bfq":         color.RGBA{213, 94, 0, 255},
	}
)

// band is the y of the scheduler band, above the deepest depth.
const band = 64

func draw1(rows []row, png, subtitle string) error {
	p := plot.New()
	p.Title.Text = "iosched daemon, [rule.adapt]: a slow loop device driven at depths 1, 32, then 2-4"
	if subtitle != "" {
		p.Title.Text += "\n" + subtitle
	}
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "requests in flight (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Min, p.Y.Max = 0.7, band*1.6
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 2, Label: "2"}, {Value: 4, Label: "4"},
		{Value: 8, Label: "8"}, {Value: 16, Label: "16"}, {Value: 32, Label: "32"}, {Value: band, Label: "scheduler"}})
	p.Add(plotter.NewGrid())
	// Right, below the band: the last phases are idle or shallow there.
	p.Legend.Top = true
	p.Legend.XOffs = vg.Points(-8)
	p.Legend.YOffs = vg.Points(-85)
	p.Legend.TextStyle.Font.Size = vg.Points(9)

	// Depth lines, broken where there is none (idle: no depth to plot on a
	// log scale, and none to judge by).
	addSeries := func(label string, col color.Color, dashed bool, y func(row) float64) error {
		var first plot.Thumbnailer
		var seg plotter.XYs
		flush := func() error {
			if len(seg) == 0 {
				return nil
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color, l.Width = col, vg.Points(2)
			if dashed {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				l.StepStyle = plotter.PreStep
			}
			p.Add(l)
			if first == nil {
				first = l
			}
			seg = nil
			return nil
		}
		for _, r := range rows {
			v := y(r)
			if v <= 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			seg = append(seg, plotter.XY{X: r.t, Y: v})
		}
		if err := flush(); err != nil {
			return err
		}
		if first != nil {
			p.Legend.Add(label, first)
		}
		return nil
	}
	if err := addSeries("depth driven (the probe's psync engine)", grey, true, func(r row) float64 { return float64(r.driven) }); err != nil {
		return err
	}
	if err := addSeries("busy depth the disk counted (its stat file)", blue, false, func(r row) float64 { return r.busyDepth }); err != nil {
		return err
	}

	// The scheduler band: one segment per run of samples on one scheduler.
	seen := map[string]bool{}
	start := 0
	for i := 1; i <= len(rows); i++ {
		if i < len(rows) && rows[i].scheduler == rows[start].scheduler {
			continue
		}
		end := rows[len(rows)-1].t
		if i < len(rows) {
			end = rows[i].t
		}
		sched := rows[start].scheduler
		col, ok := colors[sched]
		if !ok {
			col = grey
		}
		l, err := plotter.NewLine(plotter.XYs{{X: rows[start].t, Y: band}, {X: end, Y: band}})
		if err != nil {
			return err
		}
		l.Color, l.Width = col, vg.Points(12)
		p.Add(l)
		if !seen[sched] {
			seen[sched] = true
			p.Legend.Add("scheduler: "+sched, l)
		}
		start = i
	}

	// Each switch: a line down from the band, and what it switched to.
	var marks plotter.XYs
	var texts []string
	for _, r := range rows {
		if r.switchedTo == "" {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: r.t, Y: 0.7}, {X: r.t, Y: band}})
		if err != nil {
			return err
		}
		l.Color, l.Width = color.Black, vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		marks = append(marks, plotter.XY{X: r.t, Y: band * 1.25})
		texts = append(texts, "switch: "+r.switchedTo)
	}
	if len(marks) > 0 {
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: marks, Labels: texts})
		if err != nil {
			return err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Font.Size = vg.Points(8)
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		p.Add(labels)
	}

	// The phases, named at their start along the bottom.
	var at plotter.XYs
	var names []string
	for i, r := range rows {
		if r.phase != "start" && (i == 0 || r.phase != rows[i-1].phase) {
			at = append(at, plotter.XY{X: r.t, Y: 0.75})
			names = append(names, r.phase)
		}
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: names})
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(8)
		labels.TextStyle[i].Color = grey
	}
	p.Add(labels)
	p.X.Min, p.X.Max = 0, math.Ceil(rows[len(rows)-1].t)

	const w, h = 10 * vg.Inch, 5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))
	p.Draw(draw.New(img))
	return chart.WritePNG(img, png)
}
