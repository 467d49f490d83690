package admin

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// maxScrape bounds what ScrapeMetrics reads of a /metrics answer (a broker's
// is a few tens of kilobytes); beyond it the rest is ignored.
const maxScrape = 8 << 20

// Metrics is one reading of a /metrics answer (the Prometheus text format).
type Metrics struct {
	// Series holds every sample by its series as written: the metric name
	// with its labels (`deltapub_notices_total{kind="suspected"}`).
	Series map[string]float64
	// Total holds, per metric name, its samples summed over their labels.
	Total map[string]float64
}

// ParseMetrics reads the Prometheus text format. Comment lines, and lines
// whose value is not a number, are skipped; a line longer than 1 MiB is an
// error.
func ParseMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{Series: map[string]float64{}, Total: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		sp := bytes.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(line[sp+1:]), 64)
		if err != nil {
			continue
		}
		series := line[:sp]
		name := series
		if i := bytes.IndexByte(series, '{'); i >= 0 {
			name = series[:i]
		}
		m.Series[string(series)] = v
		m.Total[string(name)] += v
	}
	return m, sc.Err()
}

// ScrapeMetrics reads the /metrics of the admin endpoint at addr
// (host:port) with hc (whose Timeout bounds the request).
func ScrapeMetrics(hc *http.Client, addr string) (Metrics, error) {
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("/metrics of %s: %s", addr, resp.Status)
	}
	return ParseMetrics(io.LimitReader(resp.Body, maxScrape))
}
