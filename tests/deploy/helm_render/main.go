// helm_render renders a Helm chart the way `helm template` does, for the deploy schema check
// (tests/deploy): Go's text/template with the Sprig functions (the engine and function library
// Helm uses, from Debian's golang-go and golang-github-masterminds-sprig-dev), Helm's own
// functions (include, tpl, required, toYaml, fromYaml), values.yaml deep-merged with override
// files, numbers as float64 as Helm's JSON round trip makes them. No Kubernetes access, no
// hooks, no subcharts, no lookup.
//
// usage: helm_render CHART_DIR RELEASE_NAME [OVERRIDE.yaml ...]  > rendered.yaml
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

// normalize turns yaml.v3's decoded values into what Helm's YAML -> JSON -> Go round trip
// gives: map[string]interface{} and float64 numbers.
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = normalize(x)
		}
		return t
	case []interface{}:
		for i, x := range t {
			t[i] = normalize(x)
		}
		return t
	case int:
		return float64(t)
	case int64:
		return float64(t)
	case uint64:
		return float64(t)
	}
	return v
}

func readYaml(path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return normalize(m).(map[string]interface{}), nil
}

// merge copies src into dst, maps merged key by key (Helm's values coalescing; null deletes).
func merge(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

func toYaml(v interface{}) string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: helm_render CHART_DIR RELEASE_NAME [OVERRIDE.yaml ...]")
		os.Exit(2)
	}
	chartDir, release := os.Args[1], os.Args[2]
	chart, err := readYaml(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	values, err := readYaml(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, o := range os.Args[3:] {
		ov, err := readYaml(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		merge(values, ov)
	}
	top := map[string]interface{}{
		"Values": values,
		"Chart": map[string]interface{}{
			"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"],
		},
		"Release": map[string]interface{}{
			"Name": release, "Namespace": "default", "Service": "Helm", "IsInstall": true,
			"IsUpgrade": false, "Revision": 1,
		},
	}

	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // Helm drops these two
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYaml
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	root.Funcs(funcs).Option("missingkey=zero")

	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil || len(files) == 0 {
		fmt.Fprintln(os.Stderr, "no templates in", chartDir)
		os.Exit(1)
	}
	sort.Strings(files)
	name := fmt.Sprint(chart["name"])
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, err := root.New(name + "/templates/" + filepath.Base(f)).Parse(string(b)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasPrefix(base, "_") || !(strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")) {
			continue
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name+"/templates/"+base, top); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out := strings.TrimSpace(buf.String())
		if out == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s/templates/%s\n%s\n", name, base, out)
	}
}
