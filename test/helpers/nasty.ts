/** Values built to end a literal early, start a comment or a dollar quote, or smuggle a statement. */
export const NASTY = [
  "O'Brien",
  "it''s",
  "back\\slash",
  "back\\'; SELECT 1; --",
  "'; DROP TABLE messages; --",
  "$$; DROP TABLE messages; $$",
  "$tag$ x $tag$",
  "/* open comment",
  "close */ comment",
  "-- line comment",
  ";--",
  ":companyId :cf0 $1 ?",
  'double "quotes"',
  "tab\tnew\nline\rreturn",
  "unicode: ação, 日本語, emoji 🎉, RTL \u202e",
  "E'\\x41'",
];
