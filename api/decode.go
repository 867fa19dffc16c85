package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/holdfast/holdfast/domain"
)

// DecodeJSON strictly decodes body into v: one JSON value, no unknown fields,
// right types. Every failure is a 400 INVALID_INPUT naming what is wrong. An
// empty body decodes as {}.
func DecodeJSON(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		body = []byte("{}")
	}
	if bytes.Contains(body, []byte(`\u0000`)) { // Postgres text cannot hold NUL
		return domain.Invalid("text must not contain NUL characters")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return domain.Invalid("request body must hold a single JSON value")
	}
	return nil
}

func decodeProblem(err error) *domain.Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return domain.Invalid("malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return domain.Invalid("request body must be a JSON %s", jsonKind(typ.Type.Kind().String()))
		}
		return domain.Invalid("field %q must be %s", typ.Field, jsonKind(typ.Type.Kind().String())).WithMeta("field", typ.Field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return domain.Invalid("request body ends early")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return domain.Invalid("unknown field %q", f).WithMeta("field", f)
	}
	var p *domain.Problem
	if errors.As(err, &p) { // from a custom UnmarshalJSON
		return p
	}
	return domain.Invalid("invalid JSON: %s", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return "a number in range"
}

// Decode decodes the request body; a non-empty body must be JSON.
func Decode(c *fiber.Ctx, v any) error {
	if len(c.Body()) > 0 {
		if ct := c.Get(fiber.HeaderContentType); ct != "" && !strings.HasPrefix(strings.ToLower(ct), fiber.MIMEApplicationJSON) {
			return fiber.ErrUnsupportedMediaType
		}
	}
	return DecodeJSON(c.Body(), v)
}

// InvalidField is a 400 INVALID_INPUT naming the offending field in meta.
func InvalidField(field, format string, args ...any) *domain.Problem {
	return domain.Invalid("%s", fmt.Sprintf(format, args...)).WithMeta("field", field)
}

// PathID reads a positive integer path parameter; anything else is 404, as
// for an id that does not exist.
func PathID(c *fiber.Ctx, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Params(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, errNotFound
	}
	return id, nil
}

// RequireName checks a display name: 1 to 200 characters, not blank.
func RequireName(field, v string) error {
	if strings.TrimSpace(v) == "" || len(v) > 200 {
		return InvalidField(field, "%s must be 1 to 200 characters", field)
	}
	return nil
}
