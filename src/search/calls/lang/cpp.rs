//! C++: classes and structs with their bases, methods defined in the class or outside it
//! (`void Cache::save()`, whose in-class prototype is a declaration), `this`, bare calls of the
//! class's own methods, `ns::f` and `Type::f`, namespace aliases and `using` declarations.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&CPP];

pub static CPP: Lang = Lang {
    name: "cpp",
    extensions: &["cpp", "cc", "cxx", "c++", "hpp", "hh", "hxx", "h++", "ipp", "tpp"],
    interpreters: &[],
    grammar: || tree_sitter_cpp::LANGUAGE.into(),
    tags: &[tree_sitter_cpp::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this"],
        implicit_self: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(function_definition declarator: [
  (function_declarator declarator: [(identifier) (field_identifier) (destructor_name) (operator_name)] @name)
  (function_declarator declarator: (qualified_identifier scope: (_) @owner name: [(identifier) (destructor_name) (operator_name)] @name))
  (function_declarator declarator: (qualified_identifier scope: (_) @owner name: (qualified_identifier scope: (_) @owner name: [(identifier) (destructor_name) (operator_name)] @name)))
  (pointer_declarator declarator: (function_declarator declarator: [(identifier) (field_identifier)] @name))
  (pointer_declarator declarator: (function_declarator declarator: (qualified_identifier scope: (_) @owner name: (identifier) @name)))
  (reference_declarator (function_declarator declarator: [(identifier) (field_identifier)] @name))
  (reference_declarator (function_declarator declarator: (qualified_identifier scope: (_) @owner name: (identifier) @name)))
]) @definition.function
[(declaration declarator: [
  (function_declarator declarator: [(identifier) (field_identifier)] @name)
  (pointer_declarator declarator: (function_declarator declarator: [(identifier) (field_identifier)] @name))
  (reference_declarator (function_declarator declarator: [(identifier) (field_identifier)] @name))])
 (field_declaration declarator: [
  (function_declarator declarator: [(identifier) (field_identifier)] @name)
  (pointer_declarator declarator: (function_declarator declarator: [(identifier) (field_identifier)] @name))
  (reference_declarator (function_declarator declarator: [(identifier) (field_identifier)] @name))])
] @definition.function @declaration
(class_specifier name: [(type_identifier) @name (qualified_identifier name: (type_identifier) @name)] (base_class_clause [(type_identifier) @base (qualified_identifier name: (type_identifier) @base) (template_type name: (type_identifier) @base)])? body: (_)) @definition.class
(struct_specifier name: [(type_identifier) @name (qualified_identifier name: (type_identifier) @name)] (base_class_clause [(type_identifier) @base (qualified_identifier name: (type_identifier) @base) (template_type name: (type_identifier) @base)])? body: (_)) @definition.struct
(union_specifier name: (type_identifier) @name body: (_)) @definition.struct
(enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
(namespace_definition name: [(namespace_identifier) (nested_namespace_specifier)] @name) @definition.module
(type_definition declarator: (type_identifier) @name) @definition.type
(alias_declaration name: (type_identifier) @name) @definition.type
(preproc_function_def name: (identifier) @name) @definition.macro
(preproc_def name: (identifier) @name) @definition.constant

(call_expression function: [(identifier) @name (template_function name: (identifier) @name) (parenthesized_expression (identifier) @name)]) @reference.call
(call_expression function: (field_expression argument: (_) @receiver field: [(field_identifier) @name (template_method name: (field_identifier) @name)])) @reference.call
(call_expression function: (qualified_identifier scope: (_) @qualifier name: [(identifier) @name (template_function name: (identifier) @name)])) @reference.call
(call_expression function: (qualified_identifier scope: (_) @qualifier name: (qualified_identifier scope: (_) @qualifier name: [(identifier) @name (template_function name: (identifier) @name)]))) @reference.call
(new_expression type: [(type_identifier) @name (qualified_identifier name: (type_identifier) @name) (template_type name: (type_identifier) @name)]) @reference.new

(namespace_alias_definition name: (namespace_identifier) @import.alias [(namespace_identifier) (nested_namespace_specifier)] @import.module) @import
(using_declaration (qualified_identifier scope: (_) @import.module name: (identifier) @import.name)) @import

(declaration type: [(type_identifier) (qualified_identifier) (template_type)] @bind.type declarator: [(identifier) @bind.name (pointer_declarator declarator: (identifier) @bind.name) (reference_declarator (identifier) @bind.name) (init_declarator declarator: [(identifier) @bind.name (pointer_declarator declarator: (identifier) @bind.name) (reference_declarator (identifier) @bind.name)])])
(init_declarator declarator: (identifier) @bind.name value: (new_expression type: (_) @bind.type))
(parameter_declaration type: [(type_identifier) (qualified_identifier) (template_type)] @bind.type declarator: [(identifier) @bind.name (pointer_declarator declarator: (identifier) @bind.name) (reference_declarator (identifier) @bind.name)])
(field_declaration type: [(type_identifier) (qualified_identifier) (template_type)] @bind.type declarator: [(field_identifier) @bind.field (pointer_declarator declarator: (field_identifier) @bind.field) (reference_declarator (field_identifier) @bind.field)])
"#;
