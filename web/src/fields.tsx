// A refusal shown next to the field it is about: the server's messages name their field first
// ("public_key: ...", "users: no such user: bob (...)"), so the page puts the message under
// that field, and one that names none under the form's main field.
import type { ComponentChildren } from "preact";
import { ApiError } from "./api";
import { errorText } from "./util";

/** Which of ``fields`` a refusal is about (its message's leading "FIELD:"), else ``fallback``. */
export function refusedField(error: unknown, fields: string[], fallback: string): string {
  if (!(error instanceof ApiError)) return fallback;
  const named = error.message.split(":", 1)[0].trim();
  return fields.includes(named) ? named : fallback;
}

/** The id of the message under a field, for the field's ``aria-describedby``. */
export function errorId(form: string, field: string): string {
  return `${form}-${field}-error`;
}

/** The id of a form's field (its label's ``for``). */
export function fieldId(form: string, field: string): string {
  return `${form}-${field}`;
}

/** A labelled field with the refusal about it (if any) right under it. ``children`` is the input
 * itself, with ``id={fieldId(form, name)}`` and ``{...invalidProps(form, name, error)}``. */
export function Field({
  label,
  form,
  name,
  error,
  children,
}: {
  label: string;
  form: string;
  name: string;
  error: unknown;
  children: ComponentChildren;
}) {
  return (
    <div class="field">
      <label for={fieldId(form, name)}>{label}</label>
      {children}
      {error ? (
        <span class="field-error" id={errorId(form, name)} role="alert" data-kind="error" data-field={name}>
          {errorText(error)}
        </span>
      ) : null}
    </div>
  );
}

/** ``id`` and ``aria-*`` attributes of an input whose refusal may be shown under it. */
export function inputProps(form: string, name: string, error: unknown): Record<string, string> {
  const props: Record<string, string> = { id: fieldId(form, name), name };
  if (error) {
    props["aria-invalid"] = "true";
    props["aria-describedby"] = errorId(form, name);
  }
  return props;
}
