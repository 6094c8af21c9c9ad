package anvilctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"go.yaml.in/yaml/v4"
)

// printer writes in one of the output formats: table, yaml, json.
type printer struct {
	w      io.Writer
	format string
}

func (p *printer) table(rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 3, ' ', 0)

	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}

	return tw.Flush()
}

// structured prints v as YAML (yaml/v4, as COSI: the specs use its omitzero), or as JSON
// with the same keys as the YAML: the specs carry
// only yaml tags, so JSON goes through YAML.
func (p *printer) structured(v any) error {
	out, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("error marshaling output: %w", err)
	}

	if p.format == "yaml" {
		_, err = p.w.Write(out)

		return err
	}

	var generic any
	if err = yaml.Unmarshal(out, &generic); err != nil {
		return fmt.Errorf("error converting output to JSON: %w", err)
	}

	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")

	return enc.Encode(generic)
}

// resources prints resources of one type: a table with the definition's print columns,
// or YAML documents / JSON (an object for one resource, an array for a list).
func (p *printer) resources(rd *meta.ResourceDefinitionSpec, items []resource.Resource, single bool) error {
	if p.format != "table" {
		docs := make([]any, 0, len(items))

		for _, r := range items {
			doc, err := resource.MarshalYAML(r)
			if err != nil {
				return fmt.Errorf("error marshaling %s: %w", r.Metadata().ID(), err)
			}

			docs = append(docs, doc)
		}

		if single && len(docs) == 1 {
			return p.structured(docs[0])
		}

		if p.format == "json" {
			return p.structured(docs)
		}

		for i, doc := range docs {
			if i > 0 {
				fmt.Fprintln(p.w, "---")
			}

			if err := p.structured(doc); err != nil {
				return err
			}
		}

		return nil
	}

	header := []string{"NAMESPACE", "TYPE", "ID", "VERSION"}
	for _, col := range rd.PrintColumns {
		header = append(header, strings.ToUpper(col.Name))
	}

	rows := [][]string{header}

	for _, r := range items {
		md := r.Metadata()
		row := []string{md.Namespace(), md.Type(), md.ID(), md.Version().String()}

		spec, err := specTree(r)
		if err != nil {
			return err
		}

		for _, col := range rd.PrintColumns {
			row = append(row, orDash(jsonPath(spec, col.JSONPath)))
		}

		rows = append(rows, row)
	}

	return p.table(rows)
}

// specTree returns the resource's spec as plain maps and lists, keyed as in its YAML.
func specTree(r resource.Resource) (any, error) {
	out, err := yaml.Marshal(r.Spec())
	if err != nil {
		return nil, fmt.Errorf("error marshaling %s: %w", r.Metadata().ID(), err)
	}

	var tree any
	if err = yaml.Unmarshal(out, &tree); err != nil {
		return nil, fmt.Errorf("error reading %s: %w", r.Metadata().ID(), err)
	}

	return tree, nil
}

// jsonPath evaluates the subset of JSONPath resource definitions use for their columns:
// {.field.field} and a trailing [:] or [*] over a list, whose items are joined by commas.
// Anything else prints empty rather than failing the whole table.
func jsonPath(tree any, path string) string {
	path = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(path), "{"), "}")
	path = strings.TrimPrefix(path, ".")

	all := false
	for _, suffix := range []string{"[:]", "[*]"} {
		if strings.HasSuffix(path, suffix) {
			path, all = strings.TrimSuffix(path, suffix), true
		}
	}

	cur := tree

	if path != "" {
		for _, key := range strings.Split(path, ".") {
			m, ok := cur.(map[string]any)
			if !ok {
				return ""
			}

			cur = m[key]
		}
	}

	switch v := cur.(type) {
	case nil:
		return ""
	case []any:
		parts := make([]string, 0, len(v))
		for _, item := range v {
			parts = append(parts, fmt.Sprint(item))
		}

		if all || len(parts) > 0 {
			return strings.Join(parts, ",")
		}

		return ""
	case map[string]any:
		return ""
	default:
		return fmt.Sprint(v)
	}
}
