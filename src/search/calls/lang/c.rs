//! C: functions (a prototype is a declaration, kept apart from the definition), structs,
//! typedefs, and macros: `#define F(x)` is a definition, and `F(x)` a call gm counts but cannot
//! resolve (it does not expand macros).

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&C];

pub static C: Lang = Lang {
    name: "c",
    extensions: &["c", "h"],
    interpreters: &["tcc"],
    grammar: || tree_sitter_c::LANGUAGE.into(),
    tags: &[tree_sitter_c::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules::NONE,
};

const QUERY: &str = r#"
(function_definition declarator: [
  (function_declarator declarator: (identifier) @name)
  (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
  (pointer_declarator declarator: (pointer_declarator declarator: (function_declarator declarator: (identifier) @name)))
]) @definition.function
(declaration declarator: [
  (function_declarator declarator: (identifier) @name)
  (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
  (pointer_declarator declarator: (pointer_declarator declarator: (function_declarator declarator: (identifier) @name)))
]) @definition.function @declaration
(struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
(union_specifier name: (type_identifier) @name body: (_)) @definition.struct
(enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
(type_definition declarator: (type_identifier) @name) @definition.type
(preproc_function_def name: (identifier) @name) @definition.macro
(preproc_def name: (identifier) @name) @definition.constant

(call_expression function: [(identifier) @name (parenthesized_expression (identifier) @name) (parenthesized_expression (pointer_expression argument: (identifier) @name))]) @reference.call
(call_expression function: (field_expression argument: (_) @receiver field: (field_identifier) @name)) @reference.call
"#;
