package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/deltapub/deltapub/testbed"
)

// testbedCompareLoad is `testbed compare --load`: one broker's load in
// each of two runs, before and after.
func testbedCompareLoad(args []string, load, labels, before, after, plotFile string) int {
	c := testbed.LoadComparison{Dirs: [2]string{args[0], args[1]}, Plot: plotFile}
	var err error
	if c.Brokers, err = pair("--load", load); err == nil {
		if c.Labels, err = pair("--labels", labels); err == nil {
			if c.Before, err = window("--before", before); err == nil {
				c.After, err = window("--after", after)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub testbed compare:", err)
		return 2
	}
	out, err := c.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Print(out)
	return 0
}

func pair(flag, v string) ([2]string, error) {
	a, b, ok := strings.Cut(v, ",")
	if !ok || a == "" || b == "" || strings.Contains(b, ",") {
		return [2]string{}, fmt.Errorf("%s %q: want two names separated by a comma", flag, v)
	}
	return [2]string{a, b}, nil
}

func window(flag, v string) ([2]time.Duration, error) {
	a, b, ok := strings.Cut(v, ":")
	if !ok {
		return [2]time.Duration{}, fmt.Errorf("%s %q: want FROM:TO, e.g. 10s:20s", flag, v)
	}
	from, err1 := time.ParseDuration(a)
	to, err2 := time.ParseDuration(b)
	if err1 != nil || err2 != nil || from < 0 || to <= from {
		return [2]time.Duration{}, fmt.Errorf("%s %q: want FROM:TO with 0 ≤ FROM < TO, e.g. 10s:20s", flag, v)
	}
	return [2]time.Duration{from, to}, nil
}
