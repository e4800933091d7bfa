//! Go: methods belong to their receiver's type, a package is a directory, and `pkg.F` names
//! the package an import brought in (by its last path element or its alias).

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&GO];

pub static GO: Lang = Lang {
    name: "go",
    extensions: &["go"],
    interpreters: &[],
    grammar: || tree_sitter_go::LANGUAGE.into(),
    tags: &[tree_sitter_go::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        package_is_directory: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(package_clause (package_identifier) @module)
(function_declaration name: (identifier) @name) @definition.function
(method_declaration receiver: (parameter_list (parameter_declaration type: [(type_identifier) @owner (pointer_type (type_identifier) @owner) (generic_type type: (type_identifier) @owner) (pointer_type (generic_type type: (type_identifier) @owner))])) name: (field_identifier) @name) @definition.method
(type_spec name: (type_identifier) @name type: (struct_type)) @definition.struct
(type_spec name: (type_identifier) @name type: (interface_type)) @definition.interface
(type_spec name: (type_identifier) @name type: [(type_identifier) (pointer_type) (generic_type) (function_type) (map_type) (slice_type) (array_type) (channel_type) (qualified_type)]) @definition.type
(type_alias name: (type_identifier) @name) @definition.type
(method_elem name: (field_identifier) @name) @definition.method
(source_file (const_declaration (const_spec name: (identifier) @name) @definition.constant))
(source_file (var_declaration (var_spec name: (identifier) @name) @definition.constant))

(call_expression function: [(identifier) @name (parenthesized_expression (identifier) @name)]) @reference.call
(call_expression function: (selector_expression operand: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression function: (index_expression operand: (identifier) @name)) @reference.call
(call_expression function: (index_expression operand: (selector_expression operand: (_) @receiver field: (field_identifier) @name))) @reference.call
(type_conversion_expression type: (generic_type type: (type_identifier) @name)) @reference.call

(import_spec name: (package_identifier)? @import.alias path: (interpreted_string_literal (interpreted_string_literal_content) @import.module)) @import

(parameter_declaration name: (identifier) @bind.name type: (_) @bind.type)
(var_spec name: (identifier) @bind.name type: (_) @bind.type)
(short_var_declaration left: (expression_list . (identifier) @bind.name) right: (expression_list . [(composite_literal type: (_) @bind.type) (unary_expression operand: (composite_literal type: (_) @bind.type))]))
(field_declaration name: (field_identifier) @bind.field type: (_) @bind.type)
"#;
