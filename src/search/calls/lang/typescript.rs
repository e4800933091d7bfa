//! TypeScript and TSX: JavaScript's patterns plus type annotations, which give receivers
//! their types.

use super::javascript::COMMON;
use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&TYPESCRIPT, &TSX];

pub static TYPESCRIPT: Lang = Lang {
    name: "typescript",
    extensions: &["ts", "mts", "cts"],
    interpreters: &["ts-node", "tsx"],
    grammar: || tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
    tags: &[tree_sitter_javascript::TAGS_QUERY, tree_sitter_typescript::TAGS_QUERY],
    query: &[COMMON, TS_ONLY],
    rules: Rules {
        self_names: &["this", "super"],
        ..Rules::NONE
    },
};

pub static TSX: Lang = Lang {
    name: "tsx",
    extensions: &["tsx"],
    interpreters: &[],
    grammar: || tree_sitter_typescript::LANGUAGE_TSX.into(),
    ..TYPESCRIPT
};

const TS_ONLY: &str = r#"
(class_declaration name: (_) @name (class_heritage (extends_clause value: [(identifier) @base (member_expression property: (property_identifier) @base)]))?) @definition.class
(class_declaration name: (_) @name (class_heritage (implements_clause [(type_identifier) @base (generic_type name: (type_identifier) @base)]))) @definition.class
(abstract_class_declaration name: (_) @name (class_heritage (extends_clause value: [(identifier) @base (member_expression property: (property_identifier) @base)]))?) @definition.class
(interface_declaration name: (_) @name (extends_type_clause [(type_identifier) @base (generic_type name: (type_identifier) @base)])?) @definition.interface
(type_alias_declaration name: (_) @name) @definition.type
(enum_declaration name: (_) @name) @definition.enum
(internal_module name: (_) @name) @definition.module
(public_field_definition name: (_) @name value: [(arrow_function) (function_expression) (generator_function)]) @definition.function

(required_parameter pattern: (identifier) @bind.name type: (type_annotation [(type_identifier) (generic_type)] @bind.type))
(optional_parameter pattern: (identifier) @bind.name type: (type_annotation [(type_identifier) (generic_type)] @bind.type))
(variable_declarator name: (identifier) @bind.name type: (type_annotation [(type_identifier) (generic_type)] @bind.type))
(public_field_definition name: (property_identifier) @bind.field type: (type_annotation [(type_identifier) (generic_type)] @bind.type))
(required_parameter (accessibility_modifier) pattern: (identifier) @bind.field type: (type_annotation [(type_identifier) (generic_type)] @bind.type))
"#;
