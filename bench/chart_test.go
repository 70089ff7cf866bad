package bench

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestChart draws the expiry scenario of BenchmarkGuardExpiry as a PNG: origin
// loads per second over time for naive cache-aside, per-node singleflight and
// the guard. It is an artifact generator and runs only when given a path:
//
//	cd bench && go test -run TestChart -chart ../docs/stampede-expiry.png .
//
// Each strategy gets the same workload, one after the other: 4 nodes × 16
// callers loop over 4 hot keys for -chart.run (7s by default), the keys
// filled together just before, FreshFor 1s (guard's StaleFor 5s), origin
// 100ms, 5ms pause between requests (the expiry* constants). Every origin
// load that starts in the run is counted at its start, in 250ms buckets.

var (
	chartOut = flag.String("chart", "", "TestChart: write the expiry chart (PNG) to this path")
	chartRun = flag.Duration("chart.run", 7*time.Second, "TestChart: how long each strategy runs")
)

const chartBucket = 250 * time.Millisecond

// chartStrategies are the strategies on the chart, from cacheImpls.
var chartStrategies = []string{"naive", "singleflight", "guard"}

func TestChart(t *testing.T) {
	if *chartOut == "" {
		t.Skip("artifact generator: pass -chart out.png to draw the expiry chart")
	}
	run := *chartRun
	if run < chartBucket {
		t.Fatalf("-chart.run %v is shorter than one %v bucket", run, chartBucket)
	}
	var series []chartSeries
	for _, name := range chartStrategies {
		i := slices.IndexFunc(cacheImpls, func(im cacheImpl) bool { return im.name == name })
		if i < 0 {
			t.Fatalf("no strategy %q in cacheImpls", name)
		}
		t.Run(name, func(t *testing.T) {
			offs := expiryLoadOffsets(t, cacheImpls[i], run)
			rates := loadRates(offs, chartBucket, run)
			mean := meanRate(rates)
			t.Logf("%s: %d loads in %v, mean %.1f loads/s, peak %.0f loads/s (per %v)",
				name, len(offs), run, mean, slices.Max(rates), chartBucket)
			series = append(series, chartSeries{name: name, rates: rates, mean: mean})
		})
	}
	if t.Failed() {
		return
	}
	if err := writeChart(*chartOut, series, chartBucket); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", *chartOut)
}

// expiryLoadOffsets runs the expiry workload on fresh nodes of im for run and
// returns when each origin load of the hot keys started, as an offset from
// the start of the run. Loads of the fill before the run are not included.
func expiryLoadOffsets(t *testing.T, im cacheImpl, run time.Duration) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), run+time.Minute)
	defer cancel()
	org := newOrigin(expiryLatency)
	cfg := cacheConfig{freshFor: expiryFresh, staleFor: expiryStale}
	nodes := openNodes(t, im, expiryNodes, server(t), cfg, org, nil)
	warm := uniqueKey(t.Name() + ":warm")
	for _, n := range nodes { // dial, load scripts, subscribe
		if _, err := n.get(ctx, warm); err != nil {
			t.Fatalf("%s: warm-up: %v", im.name, err)
		}
	}
	keys := make([]string, expiryKeys)
	for i := range keys {
		keys[i] = uniqueKey(t.Name())
	}
	var wg sync.WaitGroup
	for i, k := range keys { // fill together, so they expire together
		wg.Go(func() {
			if _, err := nodes[i%len(nodes)].get(ctx, k); err != nil {
				t.Errorf("%s: fill: %v", im.name, err)
			}
		})
	}
	wg.Wait()
	t0 := time.Now()
	samples, errs := expiryWindowRun(ctx, nodes, keys, t0.Add(run))
	if len(errs) > 0 {
		t.Errorf("%s: %d of %d requests failed, first: %v", im.name, len(errs), len(samples), errs[0])
	}
	var offs []time.Duration
	for _, k := range keys {
		for _, l := range org.loadsOf(k) {
			if d := l.start.Sub(t0); d >= 0 {
				offs = append(offs, d)
			}
		}
	}
	return offs
}

// loadRates buckets load start offsets into consecutive buckets of width
// bucket from 0 and returns each bucket's rate in loads per second. Only
// whole buckets within span are kept (span/bucket of them, rounded down);
// offsets before 0 or past the last bucket are dropped. A bucket holds the
// offsets d with i*bucket <= d < (i+1)*bucket.
func loadRates(offs []time.Duration, bucket, span time.Duration) []float64 {
	n := int(span / bucket)
	counts := make([]int, n)
	for _, d := range offs {
		if d < 0 {
			continue
		}
		if i := int(d / bucket); i < n {
			counts[i]++
		}
	}
	rates := make([]float64, n)
	for i, c := range counts {
		rates[i] = float64(c) / bucket.Seconds()
	}
	return rates
}

// meanRate is the mean of equal-width buckets' rates: the loads counted in
// them over their total width.
func meanRate(rates []float64) float64 {
	if len(rates) == 0 {
		return 0
	}
	sum := 0.0
	for _, r := range rates {
		sum += r
	}
	return sum / float64(len(rates))
}

// chartSeries is one strategy's line.
type chartSeries struct {
	name  string
	rates []float64 // loads/s per bucket
	mean  float64   // loads/s over the run
}

// writeChart draws one step line per series (bucket i spans
// [i*bucket, (i+1)*bucket) seconds) to path as an 8×4 inch PNG at 120 dpi.
// The y axis is log(1+y) so that the guard's few loads stay visible next to
// naive cache-aside's bursts; zero is at the bottom.
func writeChart(path string, series []chartSeries, bucket time.Duration) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Origin loads while %d hot keys expire under steady load\n"+
		"%d nodes × %d callers, FreshFor %v, origin %v; loads per %v, log y axis",
		expiryKeys, expiryNodes, expiryCallers, expiryFresh, expiryLatency, bucket)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = vg.Points(4)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "origin loads / s"
	p.Y.Scale = log1pScale{}
	p.Y.Tick.Marker = log1pTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(8), -vg.Points(4)
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ts []plot.Tick
		for v := math.Ceil(lo); v <= hi; v++ {
			ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
		}
		return ts
	})

	colors := []color.Color{
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	}
	ymax := 1.0
	for i, s := range series {
		pts := make(plotter.XYs, 0, len(s.rates)+1)
		for j, r := range s.rates {
			pts = append(pts, plotter.XY{X: float64(j) * bucket.Seconds(), Y: r})
			ymax = max(ymax, r)
		}
		if len(s.rates) > 0 { // close the last bucket
			pts = append(pts, plotter.XY{X: float64(len(s.rates)) * bucket.Seconds(), Y: s.rates[len(s.rates)-1]})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = colors[i%len(colors)]
		l.Width = vg.Points(1.6)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (mean %.1f loads/s)", s.name, s.mean), l)
	}
	p.Y.Min, p.Y.Max = 0, ymax*3 // headroom for the legend
	p.X.Min = 0
	p.X.Max = math.Ceil(p.X.Max)

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	c := vgimg.NewWith(vgimg.UseWH(8*vg.Inch, 4*vg.Inch), vgimg.UseDPI(120))
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// log1pScale maps y to log10(1+y), so 0 is drawable.
type log1pScale struct{}

func (log1pScale) Normalize(lo, hi, x float64) float64 {
	f := func(v float64) float64 { return math.Log10(1 + max(v, 0)) }
	return (f(x) - f(lo)) / (f(hi) - f(lo))
}

// log1pTicks labels 0 and 1, 2, 5 × powers of ten.
type log1pTicks struct{}

func (log1pTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 {
		ts = append(ts, plot.Tick{Value: 0, Label: "0"})
	}
	for p := 1.0; p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
		}
	}
	return ts
}

// TestLoadRates checks the bucketing of load start offsets into loads/s.
func TestLoadRates(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, m := range v {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		offs   []time.Duration
		bucket time.Duration
		span   time.Duration
		want   []float64
	}{
		{"no loads", nil, 250 * time.Millisecond, time.Second, []float64{0, 0, 0, 0}},
		{"one load per 250ms bucket is 4/s", ms(0, 300, 600, 999), 250 * time.Millisecond, time.Second, []float64{4, 4, 4, 4}},
		{"a bucket's end belongs to the next", ms(249, 250, 250), 250 * time.Millisecond, 500 * time.Millisecond, []float64{4, 8}},
		{"burst in one bucket", ms(1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009), 500 * time.Millisecond, 2 * time.Second, []float64{0, 0, 20, 0}},
		{"unsorted", ms(900, 100, 600, 100), 500 * time.Millisecond, time.Second, []float64{4, 4}},
		{"negative and past the span dropped", ms(-1, 0, 1000, 1500), 500 * time.Millisecond, time.Second, []float64{2, 0}},
		{"partial last bucket dropped", ms(100, 1100, 1200), 500 * time.Millisecond, 1200 * time.Millisecond, []float64{2, 0}},
		{"one-second buckets are counts", ms(0, 10, 20, 1500), time.Second, 2 * time.Second, []float64{3, 1}},
		{"span shorter than a bucket", ms(0), time.Second, 500 * time.Millisecond, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := loadRates(tc.offs, tc.bucket, tc.span)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("loadRates(%v, %v, %v) = %v, want %v", tc.offs, tc.bucket, tc.span, got, tc.want)
			}
		})
	}
}
