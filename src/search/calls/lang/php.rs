//! PHP: classes, interfaces and traits, `$this`/`self::`/`static::`, `Type::f`, namespaces and
//! `use A\B as C`, typed parameters and properties, `$x = new T()`.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&PHP];

pub static PHP: Lang = Lang {
    name: "php",
    extensions: &["php", "phtml", "php8", "inc"],
    interpreters: &["php"],
    grammar: || tree_sitter_php::LANGUAGE_PHP.into(),
    tags: &[tree_sitter_php::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["$this", "self", "static", "parent"],
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(namespace_definition name: (namespace_name) @module)
(class_declaration name: (name) @name (base_clause [(name) @base (qualified_name (name) @base .)])? (class_interface_clause [(name) @base (qualified_name (name) @base .)])?) @definition.class
(interface_declaration name: (name) @name) @definition.interface
(trait_declaration name: (name) @name) @definition.trait
(enum_declaration name: (name) @name) @definition.enum
(method_declaration name: (name) @name) @definition.method
(function_definition name: (name) @name) @definition.function
(const_declaration (const_element (name) @name)) @definition.constant

(function_call_expression function: (qualified_name prefix: (_) @qualifier (name) @name .)) @reference.call
(function_call_expression function: [(name) @name (qualified_name (name) @name .)]) @reference.call
(member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(nullsafe_member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(scoped_call_expression scope: (_) @qualifier name: (name) @name) @reference.call
(object_creation_expression [(name) @name (qualified_name (name) @name .)]) @reference.new

(namespace_use_clause (qualified_name prefix: (_) @import.module (name) @import.name .) alias: (name)? @import.alias) @import

(assignment_expression left: (variable_name) @bind.name right: (object_creation_expression [(name) @bind.type (qualified_name (name) @bind.type .)]))
(assignment_expression left: (member_access_expression object: (variable_name) name: (name) @bind.field) right: (object_creation_expression [(name) @bind.type (qualified_name (name) @bind.type .)]))
(simple_parameter type: (named_type [(name) @bind.type (qualified_name (name) @bind.type .)]) name: (variable_name) @bind.name)
(property_declaration type: (named_type [(name) @bind.type (qualified_name (name) @bind.type .)]) (property_element (variable_name (name) @bind.field)))
(property_promotion_parameter type: (named_type [(name) @bind.type (qualified_name (name) @bind.type .)]) name: (variable_name (name) @bind.field))
"#;
