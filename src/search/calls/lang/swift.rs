//! Swift: classes, structs, enums, actors, protocols and extensions (an extension's methods
//! are its type's), `self`, bare calls of the type's own methods, `import Module` and
//! `Module.f()`, and receivers typed by an annotation (`let r: Repo`, a parameter, a stored
//! property) or by an initializer call (`let c = Cache()`). A closure bound to a `let` is a
//! function of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&SWIFT];

pub static SWIFT: Lang = Lang {
    name: "swift",
    extensions: &["swift"],
    interpreters: &["swift"],
    grammar: || tree_sitter_swift::LANGUAGE.into(),
    // The shipped tags query captures a whole class as each of its methods' definition, and
    // every property as one: gm's query says all it needs.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self", "super", "Self"],
        implicit_self: true,
        ..Rules::NONE
    },
};

// Swift has no `new`: a call of a capitalized name is taken as an initializer when typing a
// variable (types are named in UpperCamelCase); a lowercase one types nothing.
const QUERY: &str = r#"
(class_declaration declaration_kind: "class" name: (type_identifier) @name (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.class
(class_declaration declaration_kind: "actor" name: (type_identifier) @name (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.class
(class_declaration declaration_kind: "struct" name: (type_identifier) @name (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.struct
(class_declaration declaration_kind: "enum" name: (type_identifier) @name (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.enum
(class_declaration declaration_kind: "extension" name: (user_type (type_identifier) @name) (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.impl
(protocol_declaration name: (type_identifier) @name (inheritance_specifier inherits_from: (user_type (type_identifier) @base))?) @definition.interface
(typealias_declaration name: (type_identifier) @name) @definition.type
(function_declaration name: (simple_identifier) @name) @definition.function
(protocol_function_declaration name: (simple_identifier) @name) @definition.method
(init_declaration "init" @name) @definition.method
(property_declaration name: (pattern bound_identifier: (simple_identifier) @name) value: (lambda_literal)) @definition.function

(call_expression . (simple_identifier) @name) @reference.call
(call_expression . (navigation_expression target: (_) @receiver suffix: (navigation_suffix suffix: (simple_identifier) @name))) @reference.call

(import_declaration (identifier) @import.module) @import

(parameter name: (simple_identifier) @bind.name [(user_type) (optional_type)] @bind.type)
(property_declaration name: (pattern bound_identifier: (simple_identifier) @bind.name) (type_annotation [(user_type) (optional_type)] @bind.type))
(property_declaration name: (pattern bound_identifier: (simple_identifier) @bind.name) value: (call_expression . (simple_identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
(class_body (property_declaration name: (pattern bound_identifier: (simple_identifier) @bind.field) (type_annotation [(user_type) (optional_type)] @bind.type)))
(class_body (property_declaration name: (pattern bound_identifier: (simple_identifier) @bind.field) value: (call_expression . (simple_identifier) @bind.type) (#match? @bind.type "^[A-Z]")))
"#;
