//! Java: classes, interfaces and records, `this`/`super`, bare calls of the class's own
//! methods, `import a.b.C` and `import static a.b.C.m`, and typed locals, parameters and fields.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&JAVA];

pub static JAVA: Lang = Lang {
    name: "java",
    extensions: &["java"],
    interpreters: &[],
    grammar: || tree_sitter_java::LANGUAGE.into(),
    tags: &[tree_sitter_java::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this", "super"],
        implicit_self: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(package_declaration [(scoped_identifier) (identifier)] @module)
(class_declaration name: (identifier) @name superclass: (superclass [(type_identifier) @base (generic_type (type_identifier) @base) (scoped_type_identifier (type_identifier) @base .)])? interfaces: (super_interfaces (type_list [(type_identifier) @base (generic_type (type_identifier) @base)]))?) @definition.class
(interface_declaration name: (identifier) @name (extends_interfaces (type_list [(type_identifier) @base (generic_type (type_identifier) @base)]))?) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(record_declaration name: (identifier) @name) @definition.class
(annotation_type_declaration name: (identifier) @name) @definition.interface
(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(field_declaration (modifiers "static" "final") declarator: (variable_declarator name: (identifier) @name)) @definition.constant

(method_invocation !object name: (identifier) @name) @reference.call
(method_invocation object: (_) @receiver name: (identifier) @name) @reference.call
(object_creation_expression type: [(type_identifier) @name (generic_type (type_identifier) @name) (scoped_type_identifier (type_identifier) @name .)]) @reference.new

(import_declaration (scoped_identifier scope: (_) @import.module name: (identifier) @import.name)) @import

(local_variable_declaration type: (_) @bind.type declarator: (variable_declarator name: (identifier) @bind.name) (#not-eq? @bind.type "var"))
(variable_declarator name: (identifier) @bind.name value: (object_creation_expression type: (_) @bind.type))
(formal_parameter type: (_) @bind.type name: (identifier) @bind.name)
(field_declaration type: (_) @bind.type declarator: (variable_declarator name: (identifier) @bind.field))
"#;
